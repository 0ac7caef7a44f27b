package settle_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// settle bills a counted meter as Accrue does, whatever the shape of the
// counter's table: the key column converts the account its own way
// (a domain's length refused, never cut; bit(n) whole; the column's own
// collation), the table's other columns take their defaults, and two
// counters of one table, however they spell it, add to one row.
func TestCounters_SettleTotalsAsAccrueDoesWhateverTheTableShape(t *testing.T) {
	t.Parallel()
	type accrual struct {
		account, meter string
		ok             bool
	}
	for _, tc := range []struct {
		name     string
		ddl      string
		counters func(schema string) map[string]usage.Counter
		accrue   []accrual // through the ledger's Accrue, one finalize
		usage    []usage.Entry
		settled  bool
		read     string // one row of totals, -1 each when there is none
		want     []int64
	}{{
		name: "NOT NULL domain column beside the total",
		ddl: `CREATE DOMAIN plan_name AS text NOT NULL;
			CREATE TABLE totals (account text PRIMARY KEY, ms bigint NOT NULL DEFAULT 0, plan plan_name DEFAULT 'free')`,
		accrue:  []accrual{{"acct-1", "video_ms", true}},
		usage:   []usage.Entry{{Account: "acct-1", Meter: "video_ms", Quantity: 700}},
		settled: true,
		read:    `SELECT ms, 0 FROM totals WHERE account = 'acct-1'`,
		want:    []int64{701, 0},
	}, {
		name: "domain key with a length",
		ddl: `CREATE DOMAIN acct5 AS varchar(5);
			CREATE TABLE totals (account acct5 PRIMARY KEY, ms bigint NOT NULL DEFAULT 0)`,
		accrue:  []accrual{{"alice-2", "video_ms", false}},
		usage:   []usage.Entry{{Account: "alice-2", Meter: "video_ms", Quantity: 700}},
		settled: false,
		read:    `SELECT ms, 0 FROM totals WHERE account = 'alice'`,
		want:    []int64{-1, -1}, // not alice's
	}, {
		name:    "bit(8) key",
		ddl:     `CREATE TABLE totals (account bit(8) PRIMARY KEY, ms bigint NOT NULL DEFAULT 0)`,
		accrue:  []accrual{{"10101010", "video_ms", true}},
		usage:   []usage.Entry{{Account: "10101010", Meter: "video_ms", Quantity: 700}},
		settled: true,
		read:    `SELECT ms, 0 FROM totals WHERE account = B'10101010'`,
		want:    []int64{701, 0},
	}, {
		name: "key with a case-insensitive collation of its own",
		ddl: `CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
			CREATE TABLE totals (account text COLLATE ci PRIMARY KEY, ms bigint NOT NULL DEFAULT 0, tokens bigint NOT NULL DEFAULT 0)`,
		usage:   []usage.Entry{{Account: "Alice", Meter: "video_ms", Quantity: 700}, {Account: "alice", Meter: "tokens", Quantity: 5}},
		settled: true,
		read:    `SELECT ms, tokens FROM totals WHERE account = 'ALICE'`,
		want:    []int64{700, 5},
	}, {
		name: "one table spelled with and without its schema",
		ddl:  `CREATE TABLE totals (account text PRIMARY KEY, ms bigint NOT NULL DEFAULT 0, tokens bigint NOT NULL DEFAULT 0)`,
		counters: func(schema string) map[string]usage.Counter {
			return map[string]usage.Counter{
				"video_ms": {Table: "totals", Key: "account", Column: "ms"},
				"tokens":   {Schema: schema, Table: "totals", Key: "account", Column: "tokens"}}
		},
		accrue:  []accrual{{"acct-1", "video_ms", true}, {"acct-1", "tokens", true}},
		usage:   []usage.Entry{{Account: "acct-1", Meter: "video_ms", Quantity: 700}, {Account: "acct-1", Meter: "tokens", Quantity: 7}},
		settled: true,
		read:    `SELECT ms, tokens FROM totals WHERE account = 'acct-1'`,
		want:    []int64{701, 8},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.env.Exec(tc.ddl)
			counters := map[string]usage.Counter{"video_ms": {Table: "totals", Key: "account", Column: "ms"},
				"tokens": {Table: "totals", Key: "account", Column: "tokens"}}
			if tc.counters != nil {
				counters = tc.counters(b.env.Schema)
			}
			ledger, err := usage.NewLedger(usage.Config{Counters: counters})
			require.NoError(t, err)
			ctx := context.Background()

			first, _ := b.video(t, 1)
			fin, err := b.jobs.Guard.Finalize(ctx, b.env.Pool, first, jobguard.FinalizeSpec{})
			require.NoError(t, err)
			for _, a := range tc.accrue {
				acc, err := ledger.Accrue(ctx, b.env.Pool, fin, usage.Entry{Account: a.account, Meter: a.meter, Quantity: 1}, nil)
				if !a.ok {
					require.Error(t, err, "Accrue of %q", a.account)
					continue
				}
				require.NoError(t, err)
				require.True(t, acc.Accrued)
			}

			s := b.settler(t, quick(settle.Config{Ledger: ledger, Increments: map[string]settle.Increment{}}))
			exec, spec := b.video(t, 700)
			spec.Usage = tc.usage
			res, err := s.Finalize(ctx, b.env.Pool, exec, spec)
			require.Equal(t, tc.settled, res.Settled, "Finalize: %v", err)
			if tc.settled {
				require.NoError(t, err)
				rec, _ := b.record(t, exec)
				require.Equal(t, "confirmed", rec.State)
			} else {
				require.Error(t, err)
			}
			got := []int64{-1, -1}
			_ = b.env.Pool.QueryRow(ctx, tc.read).Scan(&got[0], &got[1])
			require.Equal(t, tc.want, got)
		})
	}
}
