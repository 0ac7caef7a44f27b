package usage_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/usage"
)

type bundle struct {
	env  *testenv.Env
	jobs *fixture.Jobs
	// increments counts how often the increment func ran in this process.
	increments atomic.Int64
}

func setup(t testing.TB, opts ...testenv.Config) *bundle {
	t.Helper()
	env := testenv.New(t, opts...)
	jobs := fixture.Create(t, env, fixture.Default)
	env.Exec(usage.Migration)
	env.Exec(`CREATE TABLE accounts (id text PRIMARY KEY, video_seconds bigint NOT NULL DEFAULT 0);
	          INSERT INTO accounts VALUES ('acct-1', 0);
	          CREATE TABLE metadata (job_id text, kind text)`)
	return &bundle{env: env, jobs: jobs}
}

// increment adds the entry's quantity to acct-1, as a caller's billing
// counter would.
func (b *bundle) increment(quantity int64) func(ctx context.Context, tx pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		b.increments.Add(1)
		tag, err := tx.Exec(ctx, `UPDATE accounts SET video_seconds = video_seconds + $1 WHERE id = 'acct-1'`, quantity)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("account row: %d rows", tag.RowsAffected())
		}
		return err
	}
}

// finalize runs Finalize for a new PROCESSING job with the given updates.
func (b *bundle) finalize(t testing.TB, status string, updates ...jobguard.Update) (jobguard.Finalized, error) {
	t.Helper()
	id := b.jobs.Insert(t, fixture.Job{Generation: 1, Status: status})
	return b.jobs.Guard.Finalize(context.Background(), b.env.Pool, jobguard.Execution{JobID: id, Generation: 1},
		jobguard.FinalizeSpec{Updates: updates})
}

func (b *bundle) meta(name string) jobguard.Update {
	return jobguard.Update{Name: name, Run: func(ctx context.Context) error {
		_, err := b.env.Pool.Exec(ctx, `INSERT INTO metadata VALUES ('x', $1)`, name)
		return err
	}}
}

// billed reads the account counter and the ledger rows from the database.
func (b *bundle) billed(t testing.TB) (seconds int64, ledgerRows int) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT video_seconds FROM accounts WHERE id = 'acct-1'`).Scan(&seconds))
	require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT count(*) FROM usage_ledger`).Scan(&ledgerRows))
	return seconds, ledgerRows
}

var entry = usage.Entry{Account: "acct-1", Meter: "video_seconds", Quantity: 90,
	Attributes: map[string]any{"resolution": "1080p"}}

func TestAccrue_ConfirmedFinalizeAccruesOnce(t *testing.T) {
	t.Parallel()
	for _, simple := range []bool{false, true} {
		t.Run(fmt.Sprintf("simple-protocol=%v", simple), func(t *testing.T) {
			t.Parallel()
			b := setup(t, testenv.Config{SimpleProtocol: simple})
			ctx := context.Background()
			fin, err := b.finalize(t, "PROCESSING", b.meta("video"), b.meta("asset"), b.meta("content"))
			require.NoError(t, err)
			require.True(t, fin.Confirmed())

			acc, err := usage.Accrue(ctx, b.env.Pool, fin, entry, b.increment(entry.Quantity))
			require.NoError(t, err)
			require.True(t, acc.Accrued)
			require.Equal(t, fin.Execution(), acc.Execution)

			again, err := usage.Accrue(ctx, b.env.Pool, fin, usage.Entry{Account: "acct-1", Meter: "video_seconds", Quantity: 5}, b.increment(5))
			require.NoError(t, err)
			require.False(t, again.Accrued, "the same finalize must not accrue twice")
			require.Equal(t, entry, again.Entry, "a replay reports the earlier accrual")
			require.Equal(t, fin.Execution(), again.Execution)
			require.WithinDuration(t, acc.RecordedAt, again.RecordedAt, time.Millisecond)

			seconds, rows := b.billed(t)
			require.Equal(t, int64(90), seconds)
			require.Equal(t, 1, rows)
			require.Equal(t, int64(1), b.increments.Load())
		})
	}
}

func TestAccrue_TwentyConcurrentCallsAccrueOnce(t *testing.T) {
	t.Parallel()
	// With an increment the ledger row is a transaction's first statement;
	// without one, a statement of its own. Either way one call accrues and
	// the others report its row.
	for _, withIncrement := range []bool{true, false} {
		t.Run(fmt.Sprintf("increment=%v", withIncrement), func(t *testing.T) {
			t.Parallel()
			twentyConcurrentCallsAccrueOnce(t, withIncrement)
		})
	}
}

func twentyConcurrentCallsAccrueOnce(t *testing.T, withIncrement bool) {
	b := setup(t, testenv.Config{MaxConns: 24})
	fin, err := b.finalize(t, "PROCESSING", b.meta("video"))
	require.NoError(t, err)

	const callers = 20
	var (
		start   = make(chan struct{})
		wg      sync.WaitGroup
		accrued atomic.Int64
		errs    = make([]error, callers)
	)
	for i := range callers {
		wg.Go(func() {
			<-start
			var inc func(context.Context, pgx.Tx) error
			if withIncrement {
				inc = b.increment(entry.Quantity)
			}
			acc, err := usage.Accrue(context.Background(), b.env.Pool, fin, entry, inc)
			errs[i] = err
			if acc.Accrued {
				accrued.Add(1)
			} else if err == nil && acc.Entry.Quantity != entry.Quantity {
				errs[i] = fmt.Errorf("a duplicate reports %+v, not the accrual's entry", acc.Entry)
			}
		})
	}
	close(start)
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.Equal(t, int64(1), accrued.Load(), "exactly one call accrues")
	seconds, rows := b.billed(t)
	require.Equal(t, 1, rows)
	if withIncrement {
		require.Equal(t, int64(90), seconds)
		require.Equal(t, int64(1), b.increments.Load())
	}
}

func TestAccrue_RefusesUnconfirmedFinalizeAndWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	failing := jobguard.Update{Name: "asset", Run: func(context.Context) error { return errors.New("asset store down") }}
	notConfirmed, err := b.finalize(t, "PROCESSING", b.meta("video"), failing)
	require.Error(t, err)
	require.True(t, notConfirmed.Completed())
	rejected, err := b.finalize(t, "FAILED", b.meta("video"))
	require.ErrorIs(t, err, jobguard.ErrJobTerminal)

	for name, fin := range map[string]jobguard.Finalized{
		"update failed":        notConfirmed,
		"completion rejected":  rejected,
		"zero value Finalized": {},
	} {
		_, err := usage.Accrue(context.Background(), b.env.Pool, fin, entry, b.increment(entry.Quantity))
		require.ErrorIs(t, err, usage.ErrNotConfirmed, name)
	}
	seconds, rows := b.billed(t)
	require.Zero(t, seconds)
	require.Zero(t, rows)
	require.Zero(t, b.increments.Load())
}

func TestAccrue_FailedIncrementLeavesNoLedgerRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	fin, err := b.finalize(t, "PROCESSING")
	require.NoError(t, err)
	boom := errors.New("boom")

	_, err = usage.Accrue(ctx, b.env.Pool, fin, entry, func(context.Context, pgx.Tx) error { return boom })
	require.ErrorIs(t, err, boom)
	_, rows := b.billed(t)
	require.Zero(t, rows, "the ledger row rolls back with the increment")

	acc, err := usage.Accrue(ctx, b.env.Pool, fin, entry, b.increment(entry.Quantity))
	require.NoError(t, err)
	require.True(t, acc.Accrued, "a later call accrues")
	seconds, rows := b.billed(t)
	require.Equal(t, int64(90), seconds)
	require.Equal(t, 1, rows)
}

func TestAccrue_EachMeterAccruesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	fin, err := b.finalize(t, "PROCESSING")
	require.NoError(t, err)
	for _, meter := range []string{"video_seconds", "storage_bytes", "video_seconds"} {
		_, err := usage.Accrue(ctx, b.env.Pool, fin, usage.Entry{Account: "acct-1", Meter: meter, Quantity: 10}, b.increment(10))
		require.NoError(t, err)
	}
	seconds, rows := b.billed(t)
	require.Equal(t, int64(20), seconds)
	require.Equal(t, 2, rows)
}

func TestAccrue_RecordsEntryForAudit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fin, err := b.finalize(t, "PROCESSING")
	require.NoError(t, err)
	_, err = usage.Accrue(context.Background(), b.env.Pool, fin, entry, nil)
	require.NoError(t, err)

	var jobID, account, resolution string
	var generation, quantity int64
	require.NoError(t, b.env.Pool.QueryRow(context.Background(),
		`SELECT job_id, generation, account, quantity, attributes->>'resolution' FROM usage_ledger`).
		Scan(&jobID, &generation, &account, &quantity, &resolution))
	require.Equal(t, fin.Execution().JobID, jobID)
	require.Equal(t, int64(1), generation)
	require.Equal(t, "acct-1", account)
	require.Equal(t, int64(90), quantity)
	require.Equal(t, "1080p", resolution)
}

func TestAccrue_InvalidEntryWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fin, err := b.finalize(t, "PROCESSING")
	require.NoError(t, err)
	for want, e := range map[string]usage.Entry{
		"Account is empty": {Meter: "m", Quantity: 1},
		"Meter is empty":   {Account: "a", Quantity: 1},
		"Quantity -1":      {Account: "a", Meter: "m", Quantity: -1},
	} {
		_, err := usage.Accrue(context.Background(), b.env.Pool, fin, e, b.increment(1))
		require.ErrorContains(t, err, want)
	}
	_, rows := b.billed(t)
	require.Zero(t, rows)
}

func TestLedger_ConfiguredTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// Every file, with the table's name replaced.
	b.env.Exec(strings.NewReplacer("usage_ledger_", "billing_ledger_", "usage_ledger", `"Billing Ledger"`).Replace(usage.Migration))
	ledger, err := usage.NewLedger(usage.Config{Schema: b.env.Schema, Table: "Billing Ledger",
		Now: func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }})
	require.NoError(t, err)
	fin, err := b.finalize(t, "PROCESSING")
	require.NoError(t, err)

	acc, err := ledger.Accrue(ctx, b.env.Pool, fin, entry, b.increment(entry.Quantity))
	require.NoError(t, err)
	require.True(t, acc.Accrued)
	var at time.Time
	require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT recorded_at FROM "Billing Ledger"`).Scan(&at))
	require.True(t, at.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), "recorded_at comes from Config.Now")
	_, rows := b.billed(t)
	require.Zero(t, rows, "the default ledger is untouched")
}

func TestNewLedger_RejectsBadNames(t *testing.T) {
	t.Parallel()
	_, err := usage.NewLedger(usage.Config{Table: strings.Repeat("x", 64)})
	require.ErrorContains(t, err, "Table")
	_, err = usage.NewLedger(usage.Config{Schema: "a\x00b"})
	require.ErrorContains(t, err, "Schema")
}

func TestAccrue_FinalizeInsideCallerTransactionThatRollsBackBillsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.jobs.Insert(t, fixture.Job{Generation: 1})
	tx, err := b.env.Pool.Begin(ctx)
	require.NoError(t, err)

	fin, ferr := b.jobs.Guard.Finalize(ctx, tx, jobguard.Execution{JobID: id, Generation: 1},
		jobguard.FinalizeSpec{Updates: []jobguard.Update{b.meta("video")}})
	_, aerr := usage.Accrue(ctx, b.env.Pool, fin, entry, b.increment(entry.Quantity))
	require.NoError(t, tx.Rollback(ctx))

	seconds, rows := b.billed(t)
	require.Zero(t, seconds, "usage billed for a completion that rolled back")
	require.Zero(t, rows)
	require.Zero(t, b.increments.Load())
	var meta int
	require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT count(*) FROM metadata`).Scan(&meta))
	require.Zero(t, meta, "no metadata update for a completion that rolled back")
	require.Equal(t, "PROCESSING", b.jobs.Read(t, id).Status)
	require.ErrorIs(t, ferr, jobguard.ErrInTransaction)
	require.False(t, fin.Confirmed(), "the completion never committed")
	require.ErrorIs(t, aerr, usage.ErrNotConfirmed)
}

func TestAccrue_InsideCallerTransactionCountsOnlyIfItCommits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	fin, err := b.finalize(t, "PROCESSING")
	require.NoError(t, err)

	tx, err := b.env.Pool.Begin(ctx)
	require.NoError(t, err)
	acc, err := usage.Accrue(ctx, tx, fin, entry, b.increment(entry.Quantity))
	require.NoError(t, err)
	require.True(t, acc.Accrued, "recorded in the caller's transaction")
	require.NoError(t, tx.Rollback(ctx))
	seconds, rows := b.billed(t)
	require.Zero(t, seconds, "the caller rolled back: nothing is billed")
	require.Zero(t, rows, "and the ledger does not remember it")

	tx, err = b.env.Pool.Begin(ctx)
	require.NoError(t, err)
	acc, err = usage.Accrue(ctx, tx, fin, entry, b.increment(entry.Quantity))
	require.NoError(t, err)
	require.True(t, acc.Accrued, "the rolled-back accrual does not count as billed")
	require.NoError(t, tx.Commit(ctx))
	again, err := usage.Accrue(ctx, b.env.Pool, fin, entry, b.increment(entry.Quantity))
	require.NoError(t, err)
	require.False(t, again.Accrued)
	seconds, rows = b.billed(t)
	require.Equal(t, entry.Quantity, seconds, "billed once, by the transaction that committed")
	require.Equal(t, 1, rows)
}

func TestAccrue_ConnectionInsideATransactionIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	fin, err := b.finalize(t, "PROCESSING")
	require.NoError(t, err)
	c, err := b.env.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	_, err = c.Exec(ctx, `BEGIN`)
	require.NoError(t, err)
	defer func() { _, _ = c.Exec(ctx, `ROLLBACK`) }()
	// The caller's own write, which only the caller may commit.
	_, err = c.Exec(ctx, `INSERT INTO metadata VALUES ('caller', 'pending')`)
	require.NoError(t, err)

	_, err = usage.Accrue(ctx, c.Conn(), fin, entry, b.increment(entry.Quantity))
	var meta int
	require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT count(*) FROM metadata`).Scan(&meta))
	require.Zero(t, meta, "Accrue committed the caller's transaction")
	seconds, rows := b.billed(t)
	require.Zero(t, seconds)
	require.Zero(t, rows)
	require.ErrorIs(t, err, jobguard.ErrInTransaction)
}

func TestAccrueTx_JoinsTheCallersTransactionWholeAndKeepsTheGate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ledger, err := usage.NewLedger(usage.Config{})
	require.NoError(t, err)
	fin, err := b.finalize(t, "PROCESSING")
	require.NoError(t, err)

	// Rolled back with the caller's transaction: nothing billed.
	tx, err := b.env.Pool.Begin(ctx)
	require.NoError(t, err)
	acc, err := ledger.AccrueTx(ctx, tx, fin, entry, b.increment(entry.Quantity))
	require.NoError(t, err)
	require.True(t, acc.Accrued)
	require.NoError(t, tx.Rollback(ctx))
	seconds, rows := b.billed(t)
	require.Zero(t, seconds)
	require.Zero(t, rows)

	// Committed: billed once; a second call in another transaction finds it.
	for range 2 {
		tx, err = b.env.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = ledger.AccrueTx(ctx, tx, fin, entry, b.increment(entry.Quantity))
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
	}
	seconds, rows = b.billed(t)
	require.Equal(t, entry.Quantity, seconds)
	require.Equal(t, 1, rows)

	// Not confirmed: refused before anything is sent, the transaction
	// still usable.
	tx, err = b.env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = ledger.AccrueTx(ctx, tx, jobguard.Finalized{}, entry, b.increment(entry.Quantity))
	require.ErrorIs(t, err, usage.ErrNotConfirmed)
	_, err = tx.Exec(ctx, `SELECT 1`)
	require.NoError(t, err)
}
