package asynqguard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/asynqguard"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

// An operator's cancel of a running task's row reaches the handler through
// the watcher (over Redis: what Cancel returned, published with
// PublishCancelled), and asynq is told SkipRetry: the task is archived at
// once, never retried, with an error that says "cancelled".
func TestMiddleware_OperatorCancelStopsTheHandlerAndSkipsRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	transport := watch.Transport{Redis: b.env.Redis}
	// A check interval of an hour: only the notice can cancel in time.
	w, err := watch.New(watch.Config{Guard: b.jobs.Guard, DB: b.env.Pool, Transport: transport, CheckInterval: time.Hour})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-w.Ready()
	pub, err := watch.NewPublisher(b.jobs.Guard, transport)
	require.NoError(t, err)

	id := b.jobs.Insert(t, fixture.Job{Status: "QUEUED"})
	var n calls
	started := make(chan jobguard.Execution, 1)
	causes := make(chan error, 1)
	b.serve(t, asynqguard.Config{Watcher: w}, func(ctx context.Context, _ *asynq.Task) error {
		n.add()
		exec, _ := asynqguard.Execution(ctx)
		started <- exec
		select { // the model call, which honours its context
		case <-ctx.Done():
			causes <- context.Cause(ctx)
			return fmt.Errorf("model call: %w", ctx.Err())
		case <-time.After(30 * time.Second):
			causes <- nil
			return errors.New("model call: the context was never cancelled")
		}
	})
	task := b.enqueue(t, payload(id))

	exec := recv(t, started, "start of the handler")
	lostExec, err := b.jobs.Guard.Cancel(context.Background(), b.env.Pool, id, "customer asked")
	require.NoError(t, err)
	require.Equal(t, exec, lostExec)
	require.NoError(t, pub.PublishCancelled(context.Background(), lostExec))

	var lost *watch.LostError
	require.ErrorAs(t, recv(t, causes, "end of the handler"), &lost)
	require.True(t, lost.Cancelled)
	info := b.settled(t, task)
	require.Equal(t, asynq.TaskStateArchived, info.State)
	require.Zero(t, info.Retried)
	require.Contains(t, info.LastErr, "was cancelled by an operator (notice for generation 1)")
	require.EqualValues(t, 1, n.get())
	row := b.jobs.Read(t, id)
	require.Equal(t, "FAILED", row.Status)
	require.Equal(t, jobguard.CancelledReasonDefault+": customer asked", row.Reason)
}

// A task whose row was cancelled before it ran is refused at its start
// with ErrCancelled, and archived without a retry.
func TestMiddleware_TaskOfACancelledJobIsRefusedAtStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.jobs.Insert(t, fixture.Job{Status: "QUEUED"})
	_, err := b.jobs.Guard.Cancel(context.Background(), b.env.Pool, id, "")
	require.NoError(t, err)
	var n calls
	b.serve(t, asynqguard.Config{}, nowhere(&n))

	task := b.enqueue(t, payload(id))

	info := b.settled(t, task)
	require.Equal(t, asynq.TaskStateArchived, info.State)
	require.Zero(t, info.Retried)
	require.Contains(t, info.LastErr, "job was cancelled")
	require.Zero(t, n.get(), "the handler is not called")
}
