package asynqguard_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/asynqguard"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

// TestMiddleware_LostHandlerThatPanicsIsNotRetried: an attempt whose
// watched context was cancelled because its job was reclaimed is refused
// and archived at once, also when the handler panics on the cancellation
// instead of returning.
func TestMiddleware_LostHandlerThatPanicsIsNotRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	transport := watch.Transport{Redis: b.env.Redis}
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
	b.serve(t, asynqguard.Config{Watcher: w}, func(ctx context.Context, _ *asynq.Task) error {
		n.add()
		exec, _ := asynqguard.Execution(ctx)
		started <- exec
		select {
		case <-ctx.Done():
			panic("model client: call on a cancelled context")
		case <-time.After(30 * time.Second):
			return nil
		}
	})
	task := b.enqueue(t, payload(id))

	recv(t, started, "start of the handler")
	b.reclaim(t, id, pub)

	info := b.settled(t, task)
	require.Equal(t, asynq.TaskStateArchived, info.State)
	require.Zero(t, info.Retried, "the lost attempt was retried: %s", info.LastErr)
	require.Contains(t, info.LastErr, "was reclaimed (notice for generation 1)")
	require.EqualValues(t, 1, n.get())
}
