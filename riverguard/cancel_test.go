package riverguard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

// An operator's cancel of a running job reaches the worker through the
// watcher (over LISTEN/NOTIFY, the notice Cancel sends with its commit),
// and River is told JobCancel: the River job ends cancelled at its first
// attempt, never retried, with an error that says "cancelled".
func TestWork_OperatorCancelCancelsTheWorkerAndTheRiverJob(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 2)
	cause := make(chan error, 2)
	b := setup(t, func(ctx context.Context, _ *river.Job[chapterArgs]) error {
		started <- struct{}{}
		select {
		case <-ctx.Done(): // the model call honours its context
			cause <- context.Cause(ctx)
			return ctx.Err()
		case <-time.After(30 * time.Second):
			cause <- nil
			return errors.New("the worker's context was not cancelled")
		}
	}, options{Watch: true})
	id := b.queue(t)
	riverID := b.insert(t, chapterArgs{JobID: id})
	waitFor(t, started, "the worker to start")
	_, err := b.jobs.Guard.Cancel(context.Background(), b.env.Pool, id, "wrong course")
	require.NoError(t, err)

	ev := b.await(t, riverID)
	require.Equal(t, river.EventKindJobCancelled, ev.Kind, "River job: %s", ev.Job.State)
	var lost *watch.LostError
	require.ErrorAs(t, <-cause, &lost)
	require.Equal(t, watch.ViaNotice, lost.Via)
	require.True(t, lost.Cancelled)
	job := b.riverJob(t, riverID)
	require.Equal(t, rivertype.JobStateCancelled, job.State)
	require.Equal(t, 1, job.Attempt, "never retried")
	require.Contains(t, lastError(t, job), "was cancelled by an operator (notice for generation 1)")
	row := b.jobs.Read(t, id)
	require.Equal(t, b.jobs.Table.Statuses.Failed, row.Status)
	require.Equal(t, jobguard.CancelledReasonDefault+": wrong course", row.Reason)
	require.Zero(t, b.chapters(t, id), "no product row for a cancelled job")
}

// A River job of a cancelled row that is delivered again is refused at
// its start, and River is told JobCancel with ErrCancelled.
func TestWork_DeliveryOfACancelledJobIsRefusedAtStart(t *testing.T) {
	t.Parallel()
	b := setup(t, func(context.Context, *river.Job[chapterArgs]) error {
		return errors.New("the worker must not run")
	}, options{})
	id := b.queue(t)
	_, err := b.jobs.Guard.Cancel(context.Background(), b.env.Pool, id, "")
	require.NoError(t, err)
	riverID := b.insert(t, chapterArgs{JobID: id})

	ev := b.await(t, riverID)
	require.Equal(t, river.EventKindJobCancelled, ev.Kind, "River job: %s", ev.Job.State)
	job := b.riverJob(t, riverID)
	require.Equal(t, 1, job.Attempt)
	require.Contains(t, lastError(t, job), jobguard.ErrCancelled.Error())
	require.Zero(t, b.worker.calls.Load(), "the worker is not called")
}
