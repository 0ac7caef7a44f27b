package settle_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

func TestFinalize_UpdatesSucceedSettlesAndBillsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exec, spec := b.video(t, 90_000)

	res, err := b.s.Finalize(context.Background(), b.env.Pool, exec, spec)
	require.NoError(t, err)
	require.True(t, res.Finalized.Confirmed())
	require.True(t, res.Settled)
	require.Len(t, res.Accruals, 1)
	require.True(t, res.Accruals[0].Accrued)
	rec, ok := b.record(t, exec)
	require.True(t, ok)
	require.Equal(t, "confirmed", rec.State)
	require.Empty(t, rec.Pending)
	require.Zero(t, rec.Attempts, "the sweep had nothing to do")
	require.Equal(t, billed{LedgerRows: 1, AccountMS: 90_000, VideoReady: true, Published: true}, b.billed(t, exec))

	rep, err := b.s.Sweep(context.Background())
	require.NoError(t, err)
	require.Zero(t, rep.Taken, "a settled record is never taken again")
}

func TestFinalize_RejectedCompletionLeavesNoRecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exec, spec := b.video(t, 1000)
	require.NoError(t, b.jobs.Guard.Fail(context.Background(), b.env.Pool, exec, jobguard.ReclaimedReasonDefault))

	res, err := b.s.Finalize(context.Background(), b.env.Pool, exec, spec)
	require.ErrorIs(t, err, jobguard.ErrJobTerminal)
	require.True(t, res.Finalized.Rejected())
	require.False(t, res.Settled)
	_, ok := b.record(t, exec)
	require.False(t, ok, "a rejected completion wrote a record")
	require.Empty(t, b.runs(t, exec))
	require.Zero(t, b.billed(t, exec).LedgerRows)
}

func TestFinalize_StoppedOrRolledBackCompletionLeavesNoRecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	stop := errors.New("video deleted")
	boom := errors.New("constraint")
	for name, tc := range map[string]struct {
		edit func(*settle.Spec)
		want error
	}{
		"recheck":  {func(s *settle.Spec) { s.Recheck = func(context.Context) error { return stop } }, jobguard.ErrStopped},
		"complete": {func(s *settle.Spec) { s.Complete = func(context.Context, pgx.Tx) error { return boom } }, boom},
	} {
		t.Run(name, func(t *testing.T) {
			exec, spec := b.video(t, 1000)
			tc.edit(&spec)
			res, err := b.s.Finalize(ctx, b.env.Pool, exec, spec)
			require.ErrorIs(t, err, tc.want)
			require.False(t, res.Finalized.Completed())
			_, ok := b.record(t, exec)
			require.False(t, ok)
			require.Equal(t, "PROCESSING", b.jobs.Read(t, exec.JobID).Status)
		})
	}
}

// With a long Grace a finalize records no success on its own while the
// other updates finish at about the same time: the statement that leaves
// the record to the sweep records it, so the sweep runs only the update
// that failed.
func TestFinalize_FailedUpdateRecordsTheOthersSuccessWithTheFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	cfg := quick(settle.Config{})
	cfg.Grace = time.Hour
	s := b.settler(t, cfg)
	exec, spec := b.video(t, 43_000)
	b.faults.set("content", 1)

	_, err := s.Finalize(ctx, b.env.Pool, exec, spec)
	require.ErrorIs(t, err, settle.ErrPending)
	rec, _ := b.record(t, exec)
	require.Equal(t, "pending", rec.State)
	require.Equal(t, []string{"content"}, rec.Pending, "the video update succeeded and is recorded")

	rep := b.settleAll(t, s)
	require.Equal(t, 1, rep.Settled)
	require.Equal(t, map[string]int{"video": 1, "content": 1}, b.runs(t, exec), "only the failed update ran again")
	require.Equal(t, billed{LedgerRows: 1, AccountMS: 43_000, VideoReady: true, Published: true}, b.billed(t, exec))
}

func TestFinalize_FailedUpdateLeavesThePendingRecordToTheSweep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	exec, spec := b.video(t, 42_000)
	b.faults.set("content", 1)

	res, err := b.s.Finalize(ctx, b.env.Pool, exec, spec)
	require.ErrorIs(t, err, settle.ErrPending)
	require.ErrorContains(t, err, "content store unavailable")
	require.True(t, res.Finalized.Completed())
	require.False(t, res.Finalized.Confirmed())
	require.False(t, res.Settled)
	rec, _ := b.record(t, exec)
	require.Equal(t, "pending", rec.State)
	require.Equal(t, []string{"content"}, rec.Pending, "the video update succeeded and is recorded")
	require.Contains(t, rec.Error, "content store unavailable", "the cause is on the record for an operator")
	require.Equal(t, billed{AccountMS: 0, VideoReady: true}, b.billed(t, exec), "nothing is billed before every update succeeded")

	rep := b.settleAll(t, b.s)
	require.Equal(t, 1, rep.Settled)
	require.Equal(t, 1, rep.Updates, "only the pending update ran again")
	require.Equal(t, map[string]int{"video": 1, "content": 1}, b.runs(t, exec))
	require.Equal(t, billed{LedgerRows: 1, AccountMS: 42_000, VideoReady: true, Published: true}, b.billed(t, exec))
}

func TestFinalize_UnregisteredNameIsRefusedBeforeAnythingIsWritten(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for name, edit := range map[string]func(*settle.Spec){
		`no handler registered for update "asset"`: func(s *settle.Spec) { s.Updates = append(s.Updates, settle.Update{Name: "asset"}) },
		`no handler registered for meter "tokens"`: func(s *settle.Spec) { s.Usage[0].Meter = "tokens" },
		`Name "video" is used twice`:               func(s *settle.Spec) { s.Updates[1].Name = "video" },
		`Meter "video_ms" is billed twice`:         func(s *settle.Spec) { s.Usage = append(s.Usage, s.Usage[0]) },
		"Quantity -1 is negative":                  func(s *settle.Spec) { s.Usage[0].Quantity = -1 },
		"Account is empty":                         func(s *settle.Spec) { s.Usage[0].Account = "" },
		"Args: json":                               func(s *settle.Spec) { s.Updates[0].Args = func() {} },
	} {
		exec, spec := b.video(t, 1000)
		edit(&spec)
		_, err := b.s.Finalize(ctx, b.env.Pool, exec, spec)
		require.ErrorContains(t, err, name)
		require.Equal(t, "PROCESSING", b.jobs.Read(t, exec.JobID).Status, name)
		_, ok := b.record(t, exec)
		require.False(t, ok, name)
	}
	exec, spec := b.video(t, 1000)
	spec.Updates = append(spec.Updates, settle.Update{Name: "asset"})
	_, err := b.s.Finalize(ctx, b.env.Pool, exec, spec)
	require.ErrorIs(t, err, settle.ErrUnregistered)
}

func TestFinalize_CallerTransactionIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	exec, spec := b.video(t, 1000)
	tx, err := b.env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()

	res, err := b.s.Finalize(ctx, tx, exec, spec)
	require.ErrorIs(t, err, jobguard.ErrInTransaction)
	require.False(t, res.Finalized.Completed())
	require.NoError(t, tx.Rollback(ctx))

	c, err := b.env.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	_, err = c.Exec(ctx, `BEGIN`)
	require.NoError(t, err)
	_, err = b.s.Finalize(ctx, c.Conn(), exec, spec)
	require.ErrorIs(t, err, jobguard.ErrInTransaction)
	_, err = c.Exec(ctx, `ROLLBACK`)
	require.NoError(t, err)

	_, ok := b.record(t, exec)
	require.False(t, ok)
	require.Equal(t, "PROCESSING", b.jobs.Read(t, exec.JobID).Status)
	require.Empty(t, b.runs(t, exec))
}

func TestFinalize_JobSpelledTwoWaysIsOneRecordAndOneBill(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	exec, spec := b.video(t, 7000)
	upper := jobguard.Execution{JobID: strings.ToUpper(exec.JobID), Generation: exec.Generation}
	b.faults.set("video", 1)

	_, err := b.s.Finalize(ctx, b.env.Pool, upper, spec)
	require.ErrorIs(t, err, settle.ErrPending)
	rec, ok := b.record(t, exec)
	require.True(t, ok, "the record is keyed by the id as the column prints it")
	require.Equal(t, "pending", rec.State)
	b.settleAll(t, b.s)
	require.Equal(t, 1, b.billed(t, exec).LedgerRows)
	var spelled string
	require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT job_id FROM usage_ledger`).Scan(&spelled))
	require.Equal(t, exec.JobID, spelled)
}

func TestFinalize_AccrueAfterASettledFinalizeFindsTheLedgerRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	exec, spec := b.video(t, 5000)
	res, err := b.s.Finalize(ctx, b.env.Pool, exec, spec)
	require.NoError(t, err)

	// A caller that also bills through usage, out of habit, bills nothing
	// twice: the ledger is one, keyed by (job, meter).
	acc, err := usage.Accrue(ctx, b.env.Pool, res.Finalized, spec.Usage[0], func(context.Context, pgx.Tx) error {
		return errors.New("must not run")
	})
	require.NoError(t, err)
	require.False(t, acc.Accrued)
	require.Equal(t, int64(5000), b.billed(t, exec).AccountMS)
}

func TestFinalize_EveryTableVariantSettles(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		env := jobs.Env
		env.Exec(usage.Migration)
		env.Exec(settle.Migration)
		env.Exec(productSchema)
		b := &bundle{env: env, jobs: jobs, faults: &faults{}, hooks: &hooks{}, logs: nil}
		s := b.settler(t, quick(settle.Config{Logger: discard()}))
		ctx := context.Background()
		id := jobs.Insert(t, fixture.Job{Generation: 1})
		vid := "video-" + id
		env.Exec(`INSERT INTO videos (id) VALUES ($1)`, vid)
		args := videoArgs{VideoID: vid, DurationMS: 10}
		exec := jobguard.Execution{JobID: id, Generation: 1}
		b.faults.set("content", 1)

		_, err := s.Finalize(ctx, env.Pool, exec, settle.Spec{
			Updates: []settle.Update{{Name: "video", Args: args}, {Name: "content", Args: args}},
			Usage:   []usage.Entry{{Account: "acct-1", Meter: "video_ms", Quantity: 10}},
		})
		require.ErrorIs(t, err, settle.ErrPending)
		rep := b.settleAll(t, s)
		require.Equal(t, 1, rep.Settled)
		var rows int
		var ms int64
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM usage_ledger), (SELECT video_ms FROM accounts)`).Scan(&rows, &ms))
		require.Equal(t, 1, rows)
		require.Equal(t, int64(10), ms)
	})
}

// A ledger row that exists before the billing (the same job billed through
// usage first) is judged per meter, as a second insert was: the record is
// confirmed, its other meter is billed, and the meter billed already runs
// no increment and reports the earlier accrual.
func TestFinalize_MeterBilledAlreadyIsADuplicateAndTheOthersAreBilled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var frames atomic.Int64
	incs := increments(b.hooks)
	incs["frames"] = func(_ context.Context, _ pgx.Tx, _ jobguard.Execution, e usage.Entry) error {
		frames.Add(e.Quantity)
		return nil
	}
	s := b.settler(t, quick(settle.Config{Increments: incs}))
	exec, spec := b.video(t, 5000)
	spec.Usage = append(spec.Usage, usage.Entry{Account: "acct-1", Meter: "frames", Quantity: 120})
	b.env.Exec(`INSERT INTO usage_ledger (jobs_table, job_id, meter, generation, account, quantity, recorded_at)
		VALUES ($1, $2, 'video_ms', 1, 'acct-1', 4000, now())`, b.jobs.Guard.TableKey(), exec.JobID)

	res, err := s.Finalize(ctx, b.env.Pool, exec, spec)
	require.NoError(t, err)
	require.True(t, res.Settled)
	require.Len(t, res.Accruals, 2)
	require.False(t, res.Accruals[0].Accrued, "video_ms was billed before")
	require.Equal(t, int64(4000), res.Accruals[0].Entry.Quantity, "the earlier accrual is reported")
	require.True(t, res.Accruals[1].Accrued, "frames is new")
	require.Zero(t, b.billed(t, exec).AccountMS, "no increment for the meter billed before")
	require.Equal(t, int64(120), frames.Load())
	require.Equal(t, 2, b.billed(t, exec).LedgerRows)
	rec, _ := b.record(t, exec)
	require.Equal(t, "confirmed", rec.State)
}

// A record given up while its finalize's updates ran (a sweep that took
// it, say) is not billed by that finalize: the ledger rows go in only with
// the confirmation, which matches only a pending record.
func TestFinalize_RecordGivenUpMeanwhileBillsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	exec, spec := b.video(t, 5000)
	b.hooks.worked = func(name string) {
		if name == "video" {
			b.env.Exec(`UPDATE job_settlements SET state = 'given_up', settled_at = now() WHERE job_id = $1`, exec.JobID)
		}
	}

	res, err := b.s.Finalize(ctx, b.env.Pool, exec, spec)
	require.ErrorIs(t, err, settle.ErrGivenUp)
	require.False(t, res.Settled)
	require.Empty(t, res.Accruals)
	require.Equal(t, billed{VideoReady: true, Published: true}, b.billed(t, exec), "no ledger row, no increment")
	rec, _ := b.record(t, exec)
	require.Equal(t, "given_up", rec.State)
}
