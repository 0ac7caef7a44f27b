package riverguard_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
)

// TestWork_LostWorkerThatPanicsIsCancelledNotRetried: a worker that panics
// on the cancellation of its lost execution, instead of returning, is told
// to River as lost and final: River cancels the job at once, and the job
// is never delivered again.
func TestWork_LostWorkerThatPanicsIsCancelledNotRetried(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	b := setup(t, func(ctx context.Context, job *river.Job[chapterArgs]) error {
		started <- struct{}{}
		select {
		case <-ctx.Done():
			panic("model client: call on a cancelled context")
		case <-time.After(30 * time.Second):
			return nil
		}
	}, options{Watch: true})
	id := b.queue(t)
	riverID := b.insert(t, chapterArgs{JobID: id})
	waitFor(t, started, "the worker to start")
	b.reclaim(t, id) // publishes the reclaim's notice

	ev := b.await(t, riverID)
	require.Equal(t, river.EventKindJobCancelled, ev.Kind, "River job: %s", ev.Job.State)
	job := b.riverJob(t, riverID)
	require.Equal(t, rivertype.JobStateCancelled, job.State)
	require.Equal(t, 1, job.Attempt, "the lost attempt was delivered again")
	require.Contains(t, lastError(t, job), "was reclaimed (notice for generation 1)")
	require.EqualValues(t, 1, b.worker.calls.Load())
}
