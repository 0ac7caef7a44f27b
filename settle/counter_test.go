package settle_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/testkit/benchkit"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// countedSettler is a Settler whose ledger counts video_ms into a table
// keyed by typ (names that need quoting), with no increment for it, and
// counts tokens into the same table's other column. total reads an
// account's video_ms (-1 without a row).
func (b *bundle) countedSettler(t *testing.T, typ string) (s *settle.Settler, total func(account string) int64) {
	t.Helper()
	b.env.Exec(fmt.Sprintf(`CREATE TABLE "Totals ""x""" ("Account Id" %s PRIMARY KEY, "Video Ms" numeric NOT NULL DEFAULT 0,
		"Tokens" bigint NOT NULL DEFAULT 0, plan text NOT NULL DEFAULT 'free')`, typ))
	counter := func(col string) usage.Counter {
		return usage.Counter{Schema: b.env.Schema, Table: `Totals "x"`, Key: "Account Id", Column: col}
	}
	ledger, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
		"video_ms": counter("Video Ms"), "tokens": counter("Tokens")}})
	require.NoError(t, err)
	s = b.settler(t, quick(settle.Config{Ledger: ledger, Increments: map[string]settle.Increment{}}))
	return s, func(account string) int64 {
		t.Helper()
		var n int64 = -1
		err := b.env.Pool.QueryRow(context.Background(),
			fmt.Sprintf(`SELECT "Video Ms" FROM "Totals ""x""" WHERE "Account Id" = $1::text::%s`, typ), account).Scan(&n)
		if !errors.Is(err, pgx.ErrNoRows) {
			require.NoError(t, err)
		}
		return n
	}
}

func TestFinalize_CountedMeterIsTotalledOnceWhateverTheKeyType(t *testing.T) {
	t.Parallel()
	// other spells the account another way, where its type has another
	// way: one row all the same.
	for _, tc := range []struct{ typ, account, other string }{
		{"text", "Acct 'two' ✓", "Acct 'two' ✓"},
		{"uuid", "6F9619FF-8B86-D011-B42D-00C04FC964FF", "{6f9619ff8b86d011b42d00c04fc964ff}"},
		{"bigint", "-42", " -042"},
	} {
		t.Run("key="+tc.typ, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			s, total := b.countedSettler(t, tc.typ)
			ctx := context.Background()

			// Billed at once by the finalize, and by the sweep after a
			// failed update; each once, the account's row inserted by the
			// first.
			var want int64
			for i, fail := range []bool{false, true} {
				exec, spec := b.video(t, int64(1000*(i+1)))
				spec.Usage = []usage.Entry{{Account: tc.account, Meter: "video_ms", Quantity: int64(1000 * (i + 1))},
					{Account: tc.other, Meter: "tokens", Quantity: 7}}
				if fail {
					b.faults.set("content", 1)
				}
				res, err := s.Finalize(ctx, b.env.Pool, exec, spec)
				if fail {
					require.Error(t, err)
					require.False(t, res.Settled)
					b.settleAll(t, s)
				} else {
					require.NoError(t, err)
					require.True(t, res.Settled)
					require.Len(t, res.Accruals, 2)
					require.True(t, res.Accruals[0].Accrued)
				}
				want += int64(1000 * (i + 1))
				require.Equal(t, want, total(tc.account))
				rep, err := s.Sweep(ctx)
				require.NoError(t, err)
				require.Zero(t, rep.Taken)
				require.Equal(t, want, total(tc.account), "a settled record is never totalled again")
			}
			var tokens int64
			require.NoError(t, b.env.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT "Tokens" FROM "Totals ""x""" WHERE "Account Id" = $1::text::%s`, tc.typ),
				tc.account).Scan(&tokens))
			require.Equal(t, int64(14), tokens)
		})
	}
}

// A meter billed already (by Accrue, through the same ledger) is a
// duplicate: its total is not added again.
func TestFinalize_CountedMeterBilledAlreadyIsNotTotalledAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s, total := b.countedSettler(t, "text")
	ctx := context.Background()
	exec, spec := b.video(t, 500)
	spec.Usage = []usage.Entry{{Account: "acct-9", Meter: "video_ms", Quantity: 500}}
	b.env.Exec(`INSERT INTO usage_ledger (jobs_table, job_id, meter, generation, account, quantity) VALUES ($1, $2, 'video_ms', 1, 'acct-9', 500)`,
		b.jobs.Guard.TableKey(), exec.JobID)
	res, err := s.Finalize(ctx, b.env.Pool, exec, spec)
	require.NoError(t, err)
	require.True(t, res.Settled)
	require.False(t, res.Accruals[0].Accrued)
	require.Equal(t, int64(-1), total("acct-9"))
}

// A counter the statement cannot use fails the billing: the record stays
// pending with no ledger row, and bills once when the counter is fixed.
func TestFinalize_CounterThatCannotBeUsedLeavesTheRecordPending(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.env.Exec(`CREATE TABLE totals (account uuid PRIMARY KEY, ms bigint NOT NULL DEFAULT 0)`)
	ledger, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
		"video_ms": {Table: "totals", Key: "account", Column: "ms"}}})
	require.NoError(t, err)
	s := b.settler(t, quick(settle.Config{Ledger: ledger, Increments: map[string]settle.Increment{}}))
	ctx := context.Background()
	exec, spec := b.video(t, 700)
	spec.Usage = []usage.Entry{{Account: "not-a-uuid", Meter: "video_ms", Quantity: 700}}
	res, err := s.Finalize(ctx, b.env.Pool, exec, spec)
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "22P02", pe.Code)
	require.False(t, res.Settled)
	rec, ok := b.record(t, exec)
	require.True(t, ok)
	require.Equal(t, "pending", rec.State)
	require.Zero(t, b.billed(t, exec).LedgerRows)

	// Fixed, and the settler built again (New reads the key's type): the
	// sweep bills the record, once.
	b.env.Exec(`DROP TABLE totals; CREATE TABLE totals (account text PRIMARY KEY, ms bigint NOT NULL DEFAULT 0)`)
	s = b.settler(t, quick(settle.Config{Ledger: ledger, Increments: map[string]settle.Increment{}}))
	b.settleAll(t, s)
	var ms int64
	require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT ms FROM totals WHERE account = 'not-a-uuid'`).Scan(&ms))
	require.Equal(t, int64(700), ms)
	require.Equal(t, 1, b.billed(t, exec).LedgerRows)
}

// A meter neither counted nor given an increment is refused before
// anything is written, as before counters.
func TestFinalize_MeterNeitherCountedNorIncrementedIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s, _ := b.countedSettler(t, "text")
	exec, spec := b.video(t, 100)
	spec.Usage = []usage.Entry{{Account: "a", Meter: "frames", Quantity: 1}}
	_, err := s.Finalize(context.Background(), b.env.Pool, exec, spec)
	require.ErrorIs(t, err, settle.ErrUnregistered)
	_, ok := b.record(t, exec)
	require.False(t, ok)
	require.Equal(t, "PROCESSING", b.jobs.Read(t, exec.JobID).Status)
}

// A counter the billing cannot use fails the billing of the records that
// bill its meter, with the database's error, and nothing of theirs is
// billed: they stay pending, for the sweep. A record that bills only
// other meters is billed.
func TestFinalize_ACounterItCannotUseFailsOnlyTheBillingOfItsMeter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		table  []string
		column string
		code   string // the SQLSTATE
	}{
		{"missing table", nil, "tokens", "42P01"},
		{"missing key", []string{`CREATE TABLE token_totals (acct text PRIMARY KEY, tokens bigint NOT NULL DEFAULT 0)`}, "tokens", "42703"},
		{"missing column", []string{`CREATE TABLE token_totals (account text PRIMARY KEY, n bigint NOT NULL DEFAULT 0)`}, "tokens", "42703"},
		{"no unique index", []string{`CREATE TABLE token_totals (account text, tokens bigint NOT NULL DEFAULT 0)`}, "tokens", "42P10"},
		{"partial unique index", []string{`CREATE TABLE token_totals (account text, tokens bigint NOT NULL DEFAULT 0)`,
			`CREATE UNIQUE INDEX ON token_totals (account) WHERE tokens > 0`}, "tokens", "42P10"},
		{"unique with another column", []string{`CREATE TABLE token_totals (account text, tokens bigint NOT NULL DEFAULT 0, UNIQUE (account, tokens))`}, "tokens", "42P10"},
		{"deferrable primary key", []string{`CREATE TABLE token_totals (account text PRIMARY KEY DEFERRABLE, tokens bigint NOT NULL DEFAULT 0)`}, "tokens", "55000"},
		{"text column", []string{`CREATE TABLE token_totals (account text PRIMARY KEY, tokens text NOT NULL DEFAULT '0')`}, "tokens", "42804"},
		{"column is the key", []string{`CREATE TABLE token_totals (account text PRIMARY KEY, tokens bigint NOT NULL DEFAULT 0)`}, "account", "42701"},
		{"generated column", []string{`CREATE TABLE token_totals (account text PRIMARY KEY, tokens bigint GENERATED ALWAYS AS (0) STORED)`}, "tokens", "428C9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			for _, sql := range tc.table {
				b.env.Exec(sql)
			}
			ctx := context.Background()
			ledger, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
				"tokens": {Table: "token_totals", Key: "account", Column: tc.column}}})
			require.NoError(t, err)
			s := b.settler(t, quick(settle.Config{Ledger: ledger}))

			only, spec := b.video(t, 700) // video_ms alone, billed by its increment
			res, err := s.Finalize(ctx, b.env.Pool, only, spec)
			require.NoError(t, err)
			require.True(t, res.Settled)

			both, spec := b.video(t, 300)
			spec.Usage = append(spec.Usage, usage.Entry{Account: "acct-1", Meter: "tokens", Quantity: 5})
			res, err = s.Finalize(ctx, b.env.Pool, both, spec)
			var pe *pgconn.PgError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, tc.code, pe.Code, pe.Message)
			require.False(t, res.Settled)
			rec, ok := b.record(t, both)
			require.True(t, ok)
			require.Equal(t, "pending", rec.State)
			require.Zero(t, b.billed(t, both).LedgerRows, "nothing of the record is billed")
			require.Equal(t, int64(700), b.billed(t, only).AccountMS, "nor its increment run")
		})
	}
}

// A finalize whose usage only the ledger's counters bill is billed in one
// statement, whatever the meters and their counters, in either protocol
// and whatever the session's time zone: its round trips are the
// completion's two and one more, as with nothing to bill.
func TestFinalize_CountedUsageIsBilledInOneRoundTrip(t *testing.T) {
	t.Parallel()
	for _, simple := range []bool{false, true} {
		t.Run(fmt.Sprintf("simple=%v", simple), func(t *testing.T) {
			t.Parallel()
			countedInOneRoundTrip(t, simple)
		})
	}
}

func countedInOneRoundTrip(t *testing.T, simple bool) {
	b := setup(t)
	b.env.Exec(`CREATE TABLE totals (account text PRIMARY KEY, ms bigint NOT NULL DEFAULT 0, tokens bigint NOT NULL DEFAULT 0);
		CREATE TABLE frame_totals (account text PRIMARY KEY, frames bigint NOT NULL DEFAULT 0)`)
	ledger, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
		"video_ms": {Table: "totals", Key: "account", Column: "ms"},
		"tokens":   {Table: "totals", Key: "account", Column: "tokens"},
		"frames":   {Table: "frame_totals", Key: "account", Column: "frames"}}})
	require.NoError(t, err)
	trips := &benchkit.RoundTrips{}
	cfg, err := pgxpool.ParseConfig(b.env.DatabaseURL)
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = trips
	if simple {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		cfg.ConnConfig.RuntimeParams["timezone"] = "Asia/Kathmandu"
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := b.settler(t, quick(settle.Config{DB: pool, Ledger: ledger, Increments: map[string]settle.Increment{}}))

	for _, tc := range []struct {
		name  string
		usage []usage.Entry
	}{
		{"nothing to bill", nil},
		{"one meter", []usage.Entry{{Account: "a", Meter: "video_ms", Quantity: 1}}},
		{"two meters of one table, two accounts", []usage.Entry{{Account: "b", Meter: "tokens", Quantity: 2}, {Account: "a", Meter: "video_ms", Quantity: 1}}},
		{"three meters of two tables", []usage.Entry{{Account: "a", Meter: "frames", Quantity: 3}, {Account: "b", Meter: "video_ms", Quantity: 4},
			{Account: "a", Meter: "tokens", Quantity: 5}}},
	} {
		exec, spec := b.video(t, 700)
		spec.Updates, spec.Usage = nil, tc.usage
		before := trips.Load()
		res, err := s.Finalize(context.Background(), pool, exec, spec)
		require.NoError(t, err, tc.name)
		require.True(t, res.Settled, tc.name)
		require.Equal(t, int64(3), trips.Load()-before, "%s: round trips of the finalize", tc.name)
		require.Len(t, res.Accruals, len(tc.usage), tc.name)
		for i, acc := range res.Accruals {
			require.True(t, acc.Accrued, "%s: %s", tc.name, acc.Entry.Meter)
			require.Equal(t, tc.usage[i], acc.Entry, "%s: accruals in the record's order", tc.name)
		}
		rec, ok := b.record(t, exec)
		require.True(t, ok)
		require.Equal(t, "confirmed", rec.State, tc.name)
	}
	var totals string
	require.NoError(t, b.env.Pool.QueryRow(context.Background(), `SELECT string_agg(t, ' ' ORDER BY t) FROM (
		SELECT account || ':' || ms || '/' || tokens AS t FROM totals UNION ALL SELECT account || ':' || frames FROM frame_totals) x`).Scan(&totals))
	require.Equal(t, "a:2/5 a:3 b:4/2", totals)
}

// A record whose usage is rewritten while a sweep's attempt runs is billed
// as it is, never as the attempt read it: the attempt bills nothing and
// fails, and the next bills the record's usage, ledger row and counter
// alike.
func TestSweep_CountedUsageRewrittenDuringTheAttemptIsBilledAsTheRecordHoldsIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s, total := b.countedSettler(t, "text")
	ctx := context.Background()
	exec, spec := b.video(t, 500)
	spec.Usage = []usage.Entry{{Account: "acct-old", Meter: "video_ms", Quantity: 500}}
	b.faults.set("content", 1)
	_, err := s.Finalize(ctx, b.env.Pool, exec, spec)
	require.ErrorIs(t, err, settle.ErrPending)

	var once sync.Once
	b.hooks.enter = func(name string) {
		once.Do(func() {
			b.env.Exec(`UPDATE job_settlements SET usage = jsonb_set(usage, '{0,account}', '"acct-new"') WHERE job_id = $1`, exec.JobID)
		})
	}
	time.Sleep(5 * time.Millisecond) // past BackoffMin
	rep, err := s.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Taken)
	require.Zero(t, rep.Settled, "the attempt that read the old usage")
	require.Zero(t, b.billed(t, exec).LedgerRows)
	require.Equal(t, []int64{-1, -1}, []int64{total("acct-old"), total("acct-new")}, "no counter moved")
	rec, _ := b.record(t, exec)
	require.Equal(t, "pending", rec.State)
	require.Contains(t, rec.Error, "not confirmed")

	b.settleAll(t, s)
	var account string
	require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT account FROM usage_ledger WHERE job_id = $1`, exec.JobID).Scan(&account))
	require.Equal(t, "acct-new", account)
	require.Equal(t, []int64{-1, 500}, []int64{total("acct-old"), total("acct-new")})
}

// When a counted meter was billed already, its earlier accrual is read
// once the billing has committed; a read that fails there does not undo
// the billing: the Result is settled, the error says what was not read,
// and the duplicate's Accrual holds its entry.
func TestFinalize_DuplicateWhoseEarlierAccrualCannotBeReadIsSettledWithAnError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.env.Exec(`CREATE TABLE totals (account text PRIMARY KEY, ms bigint NOT NULL DEFAULT 0)`)
	// A role that may insert ledger rows and read back what the billing
	// returns, but not the rest of an earlier row.
	role, cfg := b.env.Role("settle_dup")
	b.env.Exec(fmt.Sprintf(`REVOKE SELECT ON usage_ledger FROM %s`, ident.Quote(role)))
	b.env.Exec(fmt.Sprintf(`GRANT SELECT (jobs_table, job_id, meter, quantity) ON usage_ledger TO %s`, ident.Quote(role)))
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ledger, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
		"video_ms": {Table: "totals", Key: "account", Column: "ms"}, "tokens": {Table: "totals", Key: "account", Column: "ms"}}})
	require.NoError(t, err)
	s := b.settler(t, quick(settle.Config{DB: pool, Ledger: ledger, Increments: map[string]settle.Increment{}}))

	exec, spec := b.video(t, 500)
	spec.Usage = []usage.Entry{{Account: "acct-9", Meter: "video_ms", Quantity: 500}, {Account: "acct-8", Meter: "tokens", Quantity: 7}}
	b.env.Exec(`INSERT INTO usage_ledger (jobs_table, job_id, meter, generation, account, quantity) VALUES ($1, $2, 'video_ms', 1, 'acct-9', 500)`,
		b.jobs.Guard.TableKey(), exec.JobID)
	res, err := s.Finalize(context.Background(), pool, exec, spec)
	require.ErrorContains(t, err, "settled; reading the accruals back")
	require.NotErrorIs(t, err, settle.ErrPending)
	require.True(t, res.Settled)
	require.Len(t, res.Accruals, 2)
	require.False(t, res.Accruals[0].Accrued)
	require.Equal(t, spec.Usage[0], res.Accruals[0].Entry)
	require.True(t, res.Accruals[1].Accrued, "the new row's accrual needs no read")
	rec, _ := b.record(t, exec)
	require.Equal(t, "confirmed", rec.State)
	var totals string
	require.NoError(t, b.env.Pool.QueryRow(context.Background(), `SELECT string_agg(account || ':' || ms, ' ' ORDER BY account) FROM totals`).Scan(&totals))
	require.Equal(t, "acct-8:7", totals, "the duplicate is not totalled again")
}

// A record holding an entry that Accrue would refuse (written by hand, or
// by another version: a negative quantity) is not billed: the ledger's
// CHECK refuses its row, and the statement with it, totals included, and
// the record's error names the constraint.
func TestSweep_CountedEntryAccrueRefusesIsNotBilled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s, total := b.countedSettler(t, "text")
	ctx := context.Background()
	exec, spec := b.video(t, 500)
	spec.Usage = []usage.Entry{{Account: "acct-7", Meter: "video_ms", Quantity: 500}}
	b.faults.set("content", 1)
	_, err := s.Finalize(ctx, b.env.Pool, exec, spec)
	require.ErrorIs(t, err, settle.ErrPending)
	b.env.Exec(`UPDATE job_settlements SET usage = jsonb_set(usage, '{0,quantity}', '-5') WHERE job_id = $1`, exec.JobID)

	time.Sleep(5 * time.Millisecond) // past BackoffMin
	rep, err := s.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Taken)
	require.Zero(t, rep.Settled)
	require.Zero(t, b.billed(t, exec).LedgerRows)
	require.Equal(t, int64(-1), total("acct-7"))
	rec, _ := b.record(t, exec)
	require.Equal(t, "pending", rec.State)
	require.Contains(t, rec.Error, "usage_ledger_quantity_check")
}
