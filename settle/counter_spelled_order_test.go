package settle_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// Two finalizes that bill the same two counter rows, each spelling the
// rows' names its own way (one table with and without its schema, or one
// uuid account in upper and lower case), bill at once, by the one
// statement or by the transaction (a third meter with an increment): the
// one the server aborts as a deadlock is tried again. The counter table's
// trigger holds each row a moment once it is taken, so that the two
// billings overlap.
func TestCounters_FinalizesSpellingOneRowTwoWaysNeverDeadlock(t *testing.T) {
	t.Parallel()
	const p, q = "aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-000000000002"
	upper := func(s string) string {
		b := []byte(s)
		for i, c := range b {
			if c >= 'a' && c <= 'f' {
				b[i] = c - 'a' + 'A'
			}
		}
		return string(b)
	}
	for _, tc := range []struct {
		name     string
		key      string
		schema   bool // tokens' counter names the table with its schema
		accounts [2][2]string
	}{
		// Spelled one way, the rows are taken in one order: no deadlock.
		{"one table under one name", "text", false, [2][2]string{{"acct-a", "acct-b"}, {"acct-b", "acct-a"}}},
		// The same table, the same accounts, each billing's meters in the
		// opposite order of accounts: the account decides the order.
		{"one table under two names", "text", true, [2][2]string{{"acct-a", "acct-b"}, {"acct-b", "acct-a"}}},
		// The same accounts spelled two ways: the rows decide the order.
		{"one uuid account in two cases", "uuid", false, [2][2]string{{p, upper(q)}, {q, upper(p)}}},
	} {
		for _, increment := range []bool{false, true} {
			name := tc.name
			if increment {
				name += ", with an increment"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				b.env.Exec(`CREATE TABLE totals (account ` + tc.key + ` PRIMARY KEY, ms bigint NOT NULL DEFAULT 0, tokens bigint NOT NULL DEFAULT 0);
				CREATE FUNCTION hold() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.3); RETURN NEW; END $$;
				CREATE TRIGGER hold BEFORE UPDATE ON totals FOR EACH ROW EXECUTE FUNCTION hold()`)
				seed := []string{"acct-a", "acct-b"}
				if tc.key == "uuid" {
					seed = []string{p, q}
				}
				for _, a := range seed {
					b.env.Exec(`INSERT INTO totals (account) VALUES ($1::text::`+tc.key+`)`, a)
				}
				tokens := usage.Counter{Table: "totals", Key: "account", Column: "tokens"}
				if tc.schema {
					tokens.Schema = b.env.Schema
				}
				ledger, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
					"video_ms": {Table: "totals", Key: "account", Column: "ms"}, "tokens": tokens}})
				require.NoError(t, err)
				increments := map[string]settle.Increment{}
				if increment {
					increments["frames"] = func(ctx context.Context, tx pgx.Tx, _ jobguard.Execution, e usage.Entry) error {
						_, err := tx.Exec(ctx, `UPDATE accounts SET video_ms = video_ms + $1 WHERE id = 'acct-1'`, e.Quantity)
						return err
					}
				}
				s := b.settler(t, quick(settle.Config{Ledger: ledger, Increments: increments, Logger: discard()}))
				ctx := context.Background()

				var wg sync.WaitGroup
				errs := make([]error, 2)
				for i, acc := range tc.accounts {
					exec, spec := b.video(t, 1)
					spec.Updates = nil
					spec.Usage = []usage.Entry{{Account: acc[0], Meter: "video_ms", Quantity: 1}, {Account: acc[1], Meter: "tokens", Quantity: 1}}
					if increment {
						spec.Usage = append(spec.Usage, usage.Entry{Account: "acct-1", Meter: "frames", Quantity: 1})
					}
					wg.Go(func() {
						res, err := s.Finalize(ctx, b.env.Pool, exec, spec)
						if err == nil && !res.Settled {
							err = assert.AnError
						}
						errs[i] = err
					})
				}
				wg.Wait()
				assert.NoError(t, errs[0], "first finalize")
				assert.NoError(t, errs[1], "second finalize")
				var totals string
				require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT string_agg(ms || '/' || tokens, ' ') FROM totals`).Scan(&totals))
				require.Equal(t, "1/1 1/1", totals, "each row billed once by each meter")
			})
		}
	}
}
