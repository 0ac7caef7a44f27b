package usage_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/benchkit"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/usage"
)

// counterKeys are the key column types a counter's account is converted
// to, each with two accounts of its type.
var counterKeys = []struct {
	typ      string
	accounts [2]string
}{
	{"text", [2]string{"acct-1", "Acct 'two' ✓"}},
	{"uuid", [2]string{"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "6F9619FF-8B86-D011-B42D-00C04FC964FF"}},
	{"bigint", [2]string{"42", "-9223372036854775808"}},
}

// counted builds a ledger whose meter video_seconds is totalled in a table
// keyed by typ, with names that need quoting, and returns a func reading
// an account's total (-1 when it has no row).
func (b *bundle) counted(t *testing.T, typ string) (*usage.Ledger, func(account string) int64) {
	t.Helper()
	b.env.Exec(fmt.Sprintf(`CREATE TABLE "Totals ""x""" ("Account Id" %s PRIMARY KEY, "Video Seconds" numeric NOT NULL DEFAULT 0,
		plan text NOT NULL DEFAULT 'free')`, typ))
	l, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
		"video_seconds": {Schema: b.env.Schema, Table: `Totals "x"`, Key: "Account Id", Column: "Video Seconds"},
	}})
	require.NoError(t, err)
	return l, func(account string) int64 {
		t.Helper()
		var total int64 = -1
		err := b.env.Pool.QueryRow(context.Background(),
			fmt.Sprintf(`SELECT "Video Seconds" FROM "Totals ""x""" WHERE "Account Id" = $1::text::%s`, typ), account).Scan(&total)
		if !errors.Is(err, pgx.ErrNoRows) {
			require.NoError(t, err)
		}
		return total
	}
}

func (b *bundle) ledgerRows(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM usage_ledger`).Scan(&n))
	return n
}

func TestCounter_TotalsEachNewRowOnceWhateverTheKeyType(t *testing.T) {
	t.Parallel()
	for _, key := range counterKeys {
		for _, simple := range []bool{false, true} {
			t.Run(fmt.Sprintf("key=%s/simple-protocol=%v", key.typ, simple), func(t *testing.T) {
				t.Parallel()
				b := setup(t, testenv.Config{SimpleProtocol: simple})
				l, total := b.counted(t, key.typ)
				ctx := context.Background()
				first, second := key.accounts[0], key.accounts[1]
				require.Equal(t, int64(-1), total(first))

				// An account's first accrual inserts its row; the next
				// adds to it; a replay adds nothing, with the increment or
				// without it.
				var want = map[string]int64{}
				for i, acct := range []string{first, first, second} {
					fin, err := b.finalize(t, "PROCESSING")
					require.NoError(t, err)
					e := usage.Entry{Account: acct, Meter: "video_seconds", Quantity: int64(10 * (i + 1))}
					acc, err := l.Accrue(ctx, b.env.Pool, fin, e, nil)
					require.NoError(t, err)
					require.True(t, acc.Accrued)
					want[acct] += e.Quantity
					for _, inc := range []func(context.Context, pgx.Tx) error{nil, b.increment(1)} {
						again, err := l.Accrue(ctx, b.env.Pool, fin, e, inc)
						require.NoError(t, err)
						require.False(t, again.Accrued)
					}
				}
				require.Equal(t, want[first], total(first))
				require.Equal(t, want[second], total(second))
				require.Equal(t, 3, b.ledgerRows(t))
				require.Zero(t, b.increments.Load(), "a duplicate runs no increment")

				// A meter without a counter leaves the totals alone.
				fin, err := b.finalize(t, "PROCESSING")
				require.NoError(t, err)
				_, err = l.Accrue(ctx, b.env.Pool, fin, usage.Entry{Account: first, Meter: "tokens", Quantity: 7}, nil)
				require.NoError(t, err)
				require.Equal(t, want[first], total(first))
			})
		}
	}
}

func TestCounter_AndAnIncrementCommitOrRollBackWithTheRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l, total := b.counted(t, "text")
	ctx := context.Background()
	e := usage.Entry{Account: "acct-1", Meter: "video_seconds", Quantity: 30}

	fin, err := b.finalize(t, "PROCESSING")
	require.NoError(t, err)
	boom := errors.New("increment failed")
	_, err = l.Accrue(ctx, b.env.Pool, fin, e, func(context.Context, pgx.Tx) error { return boom })
	require.ErrorIs(t, err, boom)
	require.Equal(t, int64(-1), total("acct-1"), "the total rolls back with the increment")
	require.Zero(t, b.ledgerRows(t))

	acc, err := l.Accrue(ctx, b.env.Pool, fin, e, b.increment(e.Quantity))
	require.NoError(t, err)
	require.True(t, acc.Accrued)
	require.Equal(t, int64(30), total("acct-1"))
	seconds, _ := b.billed(t)
	require.Equal(t, int64(30), seconds, "the increment ran beside the counter")

	// In the caller's transaction: nothing until it commits, nothing at all
	// when it rolls back; AccrueTx the same.
	for _, commit := range []bool{false, true} {
		for _, viaTx := range []bool{false, true} {
			fin, err := b.finalize(t, "PROCESSING")
			require.NoError(t, err)
			before := total("acct-1")
			tx, err := b.env.Pool.Begin(ctx)
			require.NoError(t, err)
			var acc usage.Accrual
			if viaTx {
				acc, err = l.AccrueTx(ctx, tx, fin, e, nil)
			} else {
				acc, err = l.Accrue(ctx, tx, fin, e, nil)
			}
			require.NoError(t, err)
			require.True(t, acc.Accrued)
			require.Equal(t, before, total("acct-1"), "not before the caller commits")
			if commit {
				require.NoError(t, tx.Commit(ctx))
				require.Equal(t, before+30, total("acct-1"))
			} else {
				require.NoError(t, tx.Rollback(ctx))
				require.Equal(t, before, total("acct-1"))
			}
		}
	}
}

// A counter the statement cannot use fails the accrual with the database's
// error and writes no ledger row, so that once it is fixed the same
// finalize bills, once.
func TestCounter_ThatCannotBeUsedLosesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, table, account string
		code                 string // the SQLSTATE
	}{
		{"missing table", "", "acct-1", "42P01"},
		{"key without a unique index", `CREATE TABLE totals (account text NOT NULL, seconds bigint NOT NULL DEFAULT 0)`, "acct-1", "42P10"},
		{"account not of the key's type", `CREATE TABLE totals (account uuid PRIMARY KEY, seconds bigint NOT NULL DEFAULT 0)`, "acct-1", "22P02"},
		{"other column without a default", `CREATE TABLE totals (account text PRIMARY KEY, seconds bigint NOT NULL DEFAULT 0, owner text NOT NULL)`, "acct-1", "23502"},
	} {
		for _, increment := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/increment=%v", tc.name, increment), func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				if tc.table != "" {
					b.env.Exec(tc.table)
				}
				l, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
					"video_seconds": {Table: "totals", Key: "account", Column: "seconds"}}})
				require.NoError(t, err)
				ctx := context.Background()
				fin, err := b.finalize(t, "PROCESSING")
				require.NoError(t, err)
				var inc func(context.Context, pgx.Tx) error
				if increment {
					inc = b.increment(5)
				}
				e := usage.Entry{Account: tc.account, Meter: "video_seconds", Quantity: 5}
				_, err = l.Accrue(ctx, b.env.Pool, fin, e, inc)
				var pe *pgconn.PgError
				require.ErrorAs(t, err, &pe)
				require.Equal(t, tc.code, pe.Code, pe.Message)
				require.Zero(t, b.ledgerRows(t), "no ledger row without its total")
				require.Zero(t, b.increments.Load())

				// Fixed, the same finalize bills.
				b.env.Exec(`DROP TABLE IF EXISTS totals; CREATE TABLE totals (account text PRIMARY KEY, seconds bigint NOT NULL DEFAULT 0)`)
				acc, err := l.Accrue(ctx, b.env.Pool, fin, e, inc)
				require.NoError(t, err)
				require.True(t, acc.Accrued)
				var seconds int64
				require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT seconds FROM totals WHERE account = $1`, tc.account).Scan(&seconds))
				require.Equal(t, int64(5), seconds)
			})
		}
	}
}

// Concurrent accruals of one job's meter total it once; concurrent
// accruals of many jobs for one account, whose row none has yet, total
// every one of them.
func TestCounter_ConcurrentAccrualsTotalExactlyOnceEach(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l, total := b.counted(t, "text")
	ctx := context.Background()
	const n = 20
	fins := make([]jobguard.Finalized, n)
	for i := range fins {
		var err error
		fins[i], err = b.finalize(t, "PROCESSING")
		require.NoError(t, err)
	}
	var accrued atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		for _, fin := range []jobguard.Finalized{fins[0], fins[i]} {
			wg.Go(func() {
				acc, err := l.Accrue(ctx, b.env.Pool, fin, usage.Entry{Account: "shared", Meter: "video_seconds", Quantity: 3}, nil)
				if err != nil {
					errs <- err
					return
				}
				if acc.Accrued {
					accrued.Add(1)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int64(n), accrued.Load())
	require.Equal(t, int64(3*n), total("shared"))
	require.Equal(t, n, b.ledgerRows(t))
}

func TestCounter_AloneIsOneStatement(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l, total := b.counted(t, "text")
	trips := &benchkit.RoundTrips{}
	cfg, err := pgxpool.ParseConfig(b.env.DatabaseURL)
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = trips
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ctx := context.Background()
	fin, err := b.finalize(t, "PROCESSING")
	require.NoError(t, err)
	before := trips.Load()
	acc, err := l.Accrue(ctx, pool, fin, usage.Entry{Account: "acct-1", Meter: "video_seconds", Quantity: 4}, nil)
	require.NoError(t, err)
	require.True(t, acc.Accrued)
	require.Equal(t, int64(1), trips.Load()-before, "round trips")
	require.Equal(t, int64(4), total("acct-1"))
}

func TestNewLedger_RefusesACounterItCannotName(t *testing.T) {
	t.Parallel()
	ok := usage.Counter{Table: "totals", Key: "account", Column: "seconds"}
	for _, tc := range []struct {
		meter string
		c     usage.Counter
		want  string
	}{
		{"", ok, `Counters[""]`},
		{"m\x00", ok, "Counters"},
		{"m", usage.Counter{Key: "account", Column: "seconds"}, "Table is empty"},
		{"m", usage.Counter{Table: "totals", Column: "seconds"}, "Key is empty"},
		{"m", usage.Counter{Table: "totals", Key: "account"}, "Column is empty"},
		{"m", usage.Counter{Table: "totals", Key: "a\x00", Column: "seconds"}, "NUL"},
		{"m", usage.Counter{Schema: string(make([]byte, 64)), Table: "t", Key: "k", Column: "c"}, "Schema"},
	} {
		_, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{tc.meter: tc.c}})
		require.ErrorContains(t, err, tc.want, "%q %+v", tc.meter, tc.c)
	}
}

// An account row whose total is NULL (a nullable column, a row inserted
// before the counter existed) is counted from zero, through Accrue and
// through AccrueTx: NULL plus a quantity would stay NULL, and the total
// would silently never move.
func TestCounter_ANullTotalCountsFromZero(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.env.Exec(`CREATE TABLE totals (account text PRIMARY KEY, seconds bigint);
		INSERT INTO totals VALUES ('acct-1', NULL)`)
	l, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
		"video_seconds": {Table: "totals", Key: "account", Column: "seconds"}}})
	require.NoError(t, err)
	ctx := context.Background()
	fin, err := b.finalize(t, "PROCESSING")
	require.NoError(t, err)
	acc, err := l.Accrue(ctx, b.env.Pool, fin, usage.Entry{Account: "acct-1", Meter: "video_seconds", Quantity: 5}, nil)
	require.NoError(t, err)
	require.True(t, acc.Accrued)
	var total *int64
	require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT seconds FROM totals WHERE account = 'acct-1'`).Scan(&total))
	require.NotNil(t, total, "the total stayed NULL")
	require.Equal(t, int64(5), *total)
}
