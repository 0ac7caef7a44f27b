package jobguard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
)

func TestResume_CompletedExecutionRunsItsUpdatesAndIsConfirmed(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		jobs.Env.Exec(`CREATE TABLE metadata (job_id text, kind text, PRIMARY KEY (job_id, kind))`)
		id := jobs.Insert(t, fixture.Job{Status: jobs.Table.Statuses.Completed, Generation: 2})
		exec := jobguard.Execution{JobID: id, Generation: 2}

		fin, err := jobs.Guard.Resume(context.Background(), jobs.Env.Pool, exec, jobguard.FinalizeSpec{
			Updates: []jobguard.Update{writeMeta(jobs, id, "asset"), writeMeta(jobs, id, "content")},
		})
		require.NoError(t, err)
		require.True(t, fin.Completed())
		require.True(t, fin.Confirmed())
		require.False(t, fin.Rejected())
		require.Equal(t, exec, fin.Execution())
		require.Equal(t, []string{"asset", "content"}, metaKinds(t, jobs, id))
	})
}

func TestResume_ExecutionThatDidNotCompleteIsRejectedAndRunsNothing(t *testing.T) {
	t.Parallel()
	jobs := setupFinalize(t)
	st := jobs.Table.Statuses
	for name, tc := range map[string]struct {
		job    fixture.Job
		gen    int64
		reason jobguard.Reason
	}{
		"processing":         {fixture.Job{Status: st.Processing, Generation: 1}, 1, jobguard.ReasonStatus},
		"reclaimed":          {fixture.Job{Status: st.Failed, Generation: 1, Reason: jobguard.ReclaimedReasonDefault}, 1, jobguard.ReasonStatus},
		"completed by other": {fixture.Job{Status: st.Completed, Generation: 3}, 2, jobguard.ReasonSuperseded},
	} {
		t.Run(name, func(t *testing.T) {
			id := jobs.Insert(t, tc.job)
			ran := false
			fin, err := jobs.Guard.Resume(context.Background(), jobs.Env.Pool, jobguard.Execution{JobID: id, Generation: tc.gen},
				jobguard.FinalizeSpec{Updates: []jobguard.Update{{Name: "video", Run: func(context.Context) error { ran = true; return nil }}}})
			require.ErrorIs(t, err, jobguard.ErrJobTerminal)
			var se *jobguard.StateError
			require.ErrorAs(t, err, &se)
			require.Equal(t, "resume", string(se.Op))
			require.Equal(t, tc.reason, se.Reason)
			require.True(t, fin.Rejected())
			require.False(t, fin.Completed())
			require.False(t, fin.Confirmed())
			require.False(t, ran, "an update ran for an execution that never completed")
		})
	}
	t.Run("not found", func(t *testing.T) {
		fin, err := jobs.Guard.Resume(context.Background(), jobs.Env.Pool,
			jobguard.Execution{JobID: "0b7e8f64-5d0a-4c4e-9f43-3f1f0b2f6d11", Generation: 1}, jobguard.FinalizeSpec{})
		var se *jobguard.StateError
		require.ErrorAs(t, err, &se)
		require.Equal(t, jobguard.ReasonNotFound, se.Reason)
		require.True(t, fin.Rejected())
	})
}

func TestResume_FailedUpdateIsNotConfirmedUntilAResumeSucceeds(t *testing.T) {
	t.Parallel()
	jobs := setupFinalize(t)
	id := jobs.Insert(t, fixture.Job{Generation: 1})
	exec := jobguard.Execution{JobID: id, Generation: 1}
	boom := errors.New("asset store down")
	fin, err := jobs.Guard.Finalize(context.Background(), jobs.Env.Pool, exec, jobguard.FinalizeSpec{
		Updates: []jobguard.Update{{Name: "asset", Run: func(context.Context) error { return boom }}},
	})
	require.ErrorIs(t, err, boom)
	require.False(t, fin.Confirmed())

	fin, err = jobs.Guard.Resume(context.Background(), jobs.Env.Pool, exec, jobguard.FinalizeSpec{
		Updates: []jobguard.Update{{Name: "asset", Run: func(context.Context) error { return boom }}},
	})
	require.ErrorIs(t, err, boom)
	require.True(t, fin.Completed())
	require.False(t, fin.Confirmed())
	require.Equal(t, []string{"asset"}, fin.Failed())

	fin, err = jobs.Guard.Resume(context.Background(), jobs.Env.Pool, exec, jobguard.FinalizeSpec{
		Updates: []jobguard.Update{writeMeta(jobs, id, "asset")},
	})
	require.NoError(t, err)
	require.True(t, fin.Confirmed())
	require.Equal(t, []string{"asset"}, metaKinds(t, jobs, id))
}

func TestResume_CallerTransactionIsRefused(t *testing.T) {
	t.Parallel()
	jobs := setupFinalize(t)
	ctx := context.Background()
	id := jobs.Insert(t, fixture.Job{Generation: 1})
	exec := jobguard.Execution{JobID: id, Generation: 1}
	tx, err := jobs.Env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	// The completion is written in the caller's transaction, not committed:
	// Resume must not see it, let alone confirm it.
	require.NoError(t, jobs.Guard.CompleteIfActive(ctx, tx, exec))

	fin, err := jobs.Guard.Resume(ctx, tx, exec, jobguard.FinalizeSpec{Updates: []jobguard.Update{writeMeta(jobs, id, "video")}})
	require.ErrorIs(t, err, jobguard.ErrInTransaction)
	require.False(t, fin.Completed())
	require.False(t, fin.Confirmed())

	c := openConnTx(t, jobs.Env.Pool)
	_, err = jobs.Guard.Resume(ctx, c.Conn(), exec, jobguard.FinalizeSpec{})
	require.ErrorIs(t, err, jobguard.ErrInTransaction)
	require.NoError(t, tx.Rollback(ctx))
	require.Empty(t, metaKinds(t, jobs, id))
}

func TestResume_SpecOfTheCompletionIsRefused(t *testing.T) {
	t.Parallel()
	jobs := setupFinalize(t)
	id := jobs.Insert(t, fixture.Job{Status: "COMPLETED", Generation: 1})
	exec := jobguard.Execution{JobID: id, Generation: 1}
	ok := func(context.Context) error { return nil }
	for name, spec := range map[string]jobguard.FinalizeSpec{
		"Recheck is set":  {Recheck: ok},
		"Complete is set": {Complete: func(context.Context, pgx.Tx) error { return nil }},
		"used twice":      {Updates: []jobguard.Update{{Name: "v", Run: ok}, {Name: "v", Run: ok}}},
	} {
		fin, err := jobs.Guard.Resume(context.Background(), jobs.Env.Pool, exec, spec)
		require.ErrorContains(t, err, name)
		require.False(t, fin.Confirmed())
	}
	_, err := jobs.Guard.Resume(context.Background(), jobs.Env.Pool, jobguard.Execution{JobID: "not-a-uuid", Generation: 1}, jobguard.FinalizeSpec{})
	require.ErrorIs(t, err, jobguard.ErrInvalidJobID)
}

// Resume runs its updates as Finalize does: a panicking one fails alone,
// with a *PanicError, and nothing panics in the caller (the settle sweep).
func TestResume_PanickingUpdateFailsItAlone(t *testing.T) {
	t.Parallel()
	jobs := setupFinalize(t)
	id := jobs.Insert(t, fixture.Job{Status: jobs.Table.Statuses.Completed, Generation: 1})
	var fin jobguard.Finalized
	var err error
	require.NotPanics(t, func() {
		fin, err = jobs.Guard.Resume(context.Background(), jobs.Env.Pool, jobguard.Execution{JobID: id, Generation: 1}, jobguard.FinalizeSpec{
			Updates: []jobguard.Update{
				{Name: "asset", Run: func(context.Context) error { panic("boom") }},
				writeMeta(jobs, id, "video"),
			},
		})
	})
	var pe *jobguard.PanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "boom", pe.Value)
	require.True(t, fin.Completed())
	require.False(t, fin.Confirmed())
	require.Equal(t, []string{"asset"}, fin.Failed())
	require.Equal(t, []string{"video"}, metaKinds(t, jobs, id))
}
