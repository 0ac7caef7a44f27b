package jobguard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
)

func newStartGuard(t *testing.T, jobs *fixture.Jobs, opts jobguard.StartGuardConfig) *jobguard.StartGuard {
	t.Helper()
	sg, err := jobguard.NewStartGuard(jobs.Guard, jobs.Env.Redis, opts)
	require.NoError(t, err)
	return sg
}

func TestGeneration_RestartFencesOutOldExecution(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		if !jobs.Guard.Fenced() {
			t.Skip("status-only table: a restart cannot fence out the old execution (see TestGeneration_StatusOnlyModeIsWeaker)")
		}
		ctx := context.Background()
		db := jobs.Env.Pool
		sg := newStartGuard(t, jobs, jobguard.StartGuardConfig{})
		id := jobs.Insert(t, fixture.Job{Status: jobs.Table.Statuses.Queued})

		old, err := sg.Start(ctx, db, id)
		require.NoError(t, err)
		// The queue redelivers (the worker looked dead): a new execution.
		cur, err := sg.Start(ctx, db, id)
		require.NoError(t, err)
		require.Greater(t, cur.Generation, old.Generation)
		before := jobs.Read(t, id)

		for name, write := range map[string]func() error{
			"complete":   func() error { return jobs.Guard.CompleteIfActive(ctx, db, old) },
			"processing": func() error { return jobs.Guard.CompleteIfProcessing(ctx, db, old) },
			"fail":       func() error { return jobs.Guard.Fail(ctx, db, old, "late failure") },
			"touch":      func() error { return jobs.Guard.Touch(ctx, db, old) },
		} {
			err := write()
			require.ErrorIs(t, err, jobguard.ErrJobTerminal, name)
			var se *jobguard.StateError
			require.ErrorAs(t, err, &se, name)
			require.Equal(t, jobguard.ReasonSuperseded, se.Reason, name)
			require.Equal(t, cur.Generation, se.Generation, name)
			require.Equal(t, old.Generation, se.Want, name)
		}
		require.Equal(t, before, jobs.Read(t, id), "the old execution changed the row")

		require.NoError(t, jobs.Guard.CompleteIfActive(ctx, db, cur))
		require.Equal(t, jobs.Table.Statuses.Completed, jobs.Read(t, id).Status)
	})
}

func TestGeneration_StatusOnlyModeIsWeaker(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.NoGeneration)
	ctx := context.Background()
	require.False(t, jobs.Guard.Fenced())
	sg := newStartGuard(t, jobs, jobguard.StartGuardConfig{})
	id := jobs.Insert(t, fixture.Job{Status: "QUEUED"})
	old, err := sg.Start(ctx, env.Pool, id)
	require.NoError(t, err)
	_, err = sg.Start(ctx, env.Pool, id)
	require.NoError(t, err)
	// Documented weakness: without a generation column the stale execution's
	// status-only completion passes.
	require.NoError(t, jobs.Guard.CompleteIfActive(ctx, env.Pool, old))
}

func TestStart_NeverRevivesFailedJob(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		st := jobs.Table.Statuses
		sg := newStartGuard(t, jobs, jobguard.StartGuardConfig{})
		for _, status := range []string{st.Failed, st.Completed} {
			id := jobs.Insert(t, fixture.Job{Status: status, Reason: "encoder crashed", Generation: 2})
			before := jobs.Read(t, id)
			_, err := sg.Start(ctx, jobs.Env.Pool, id)
			require.ErrorIs(t, err, jobguard.ErrJobTerminal, status)
			require.True(t, jobguard.IsPermanent(err))
			require.Equal(t, before, jobs.Read(t, id))
		}
	})
}

func TestFail_IsConditional(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		st := jobs.Table.Statuses
		id := jobs.Insert(t, fixture.Job{Generation: 4})
		exec := jobguard.Execution{JobID: id, Generation: 4}
		require.NoError(t, jobs.Guard.Fail(ctx, jobs.Env.Pool, exec, "model refused"))
		row := jobs.Read(t, id)
		require.Equal(t, st.Failed, row.Status)
		require.Equal(t, "model refused", row.Reason)

		err := jobs.Guard.Fail(ctx, jobs.Env.Pool, exec, "again")
		require.ErrorIs(t, err, jobguard.ErrJobTerminal)
		require.Equal(t, "model refused", jobs.Read(t, id).Reason)
	})
}

func TestRetry_MakesReclaimedJobStartableDespiteOldMarker(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		if !jobs.Guard.Fenced() {
			t.Skip("status-only table: the marker must be deleted with marker.RedisStore.Delete")
		}
		ctx := context.Background()
		db := jobs.Env.Pool
		st := jobs.Table.Statuses
		sg := newStartGuard(t, jobs, jobguard.StartGuardConfig{})
		id := jobs.Insert(t, fixture.Job{Status: st.Queued})
		exec, err := sg.Start(ctx, db, id)
		require.NoError(t, err)

		// What the reclaimer does: fail with the reclaimed reason, write a marker.
		require.NoError(t, jobs.Guard.Fail(ctx, db, exec, jobguard.ReclaimedReasonDefault))
		require.NoError(t, sg.Markers().Write(ctx, marker.Marker{JobID: id, Generation: exec.Generation, Reason: jobguard.ReclaimedReasonDefault}))
		_, err = sg.Start(ctx, db, id)
		require.ErrorIs(t, err, jobguard.ErrReclaimed)

		gen, err := jobs.Guard.Retry(ctx, db, id)
		require.NoError(t, err)
		require.Greater(t, gen, exec.Generation)
		row := jobs.Read(t, id)
		require.Equal(t, st.Queued, row.Status)
		require.Empty(t, row.Reason)

		_, found, err := sg.Markers().Read(ctx, id)
		require.NoError(t, err)
		require.True(t, found, "the old marker is still there")
		require.NoError(t, sg.Check(ctx, db, id))
		next, err := sg.Start(ctx, db, id)
		require.NoError(t, err)
		require.Greater(t, next.Generation, gen)
		require.NoError(t, jobs.Guard.CompleteIfActive(ctx, db, next))
	})
}

func TestRetry_RefusesJobThatIsNotFailed(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		id := jobs.Insert(t, fixture.Job{Generation: 1})
		_, err := jobs.Guard.Retry(context.Background(), jobs.Env.Pool, id)
		require.ErrorIs(t, err, jobguard.ErrNotRetryable)
		require.NotErrorIs(t, err, jobguard.ErrJobTerminal)
		require.Equal(t, jobs.Table.Statuses.Processing, jobs.Read(t, id).Status)
	})
}

// An operator retries a reclaimed job while its old execution still runs
// (its call ignored the cancellation). The job waits QUEUED, which
// CompleteIfActive accepts; only the generation keeps the old execution
// out: its completion, its touch and its fail are refused as superseded,
// before and after the retried job starts, and the new execution
// completes. While the retried job waits in QUEUED, the refusal says it
// went back to the queue (ErrRequeued, not permanent: its queue must not
// drop the job); once the new execution runs it, the refusal is final.
func TestRetry_OldExecutionStillRunningChangesNothing(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		if !jobs.Guard.Fenced() {
			t.Skip("status-only table: the documented weakness, an old execution cannot be told apart")
		}
		ctx := context.Background()
		db := jobs.Env.Pool
		st := jobs.Table.Statuses
		sg := newStartGuard(t, jobs, jobguard.StartGuardConfig{})
		id := jobs.Insert(t, fixture.Job{Status: st.Queued})
		old, err := sg.Start(ctx, db, id)
		require.NoError(t, err)
		require.NoError(t, jobs.Guard.Fail(ctx, db, old, jobguard.ReclaimedReasonDefault)) // the reclaim
		_, err = jobs.Guard.Retry(ctx, db, id)
		require.NoError(t, err)

		refused := func(what string, err error) {
			t.Helper()
			var se *jobguard.StateError
			require.ErrorAs(t, err, &se, what)
			require.Equal(t, jobguard.ReasonSuperseded, se.Reason, what)
			queued := se.Status == st.Queued
			require.Equal(t, queued, errors.Is(err, jobguard.ErrRequeued), what)
			require.Equal(t, !queued, jobguard.IsPermanent(err), what)
		}
		refused("complete while queued", jobs.Guard.CompleteIfActive(ctx, db, old))
		refused("fail while queued", jobs.Guard.Fail(ctx, db, old, "late"))
		require.Equal(t, st.Queued, jobs.Read(t, id).Status, "the retried job still waits")

		next, err := sg.Start(ctx, db, id)
		require.NoError(t, err)
		refused("touch while the new one runs", jobs.Guard.Touch(ctx, db, old))
		refused("complete while the new one runs", jobs.Guard.CompleteIfActive(ctx, db, old))
		require.NoError(t, jobs.Guard.CompleteIfActive(ctx, db, next))
		row := jobs.Read(t, id)
		require.Equal(t, st.Completed, row.Status)
		require.Equal(t, next.Generation, row.Generation)
	})
}
