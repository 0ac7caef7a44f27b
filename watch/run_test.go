package watch_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

// TestRun_ReturnsAndLeavesNoGoroutines is not parallel: it counts the
// process's goroutines, so nothing else may run beside it.
func TestRun_ReturnsAndLeavesNoGoroutines(t *testing.T) {
	for _, kind := range transports {
		t.Run(kind, func(t *testing.T) {
			env := testenv.New(t)
			jobs := fixture.Create(t, env, fixture.Default)
			w, err := watch.New(watch.Config{
				Guard: jobs.Guard, DB: env.Pool, Transport: transportFor(env, kind),
				CheckInterval: 10 * time.Millisecond, PingInterval: 10 * time.Millisecond,
			})
			require.NoError(t, err)
			before := runtime.NumGoroutine()

			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			require.Eventually(t, w.Subscribed, 5*time.Second, time.Millisecond)
			watched, release := w.Watch(context.Background(),
				jobguard.Execution{JobID: jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1})
			time.Sleep(50 * time.Millisecond) // checks and pings in flight
			require.NoError(t, watched.Err())

			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return within 5s of its context ending")
			}
			require.False(t, w.Subscribed())
			release()
			deadline := time.Now().Add(5 * time.Second)
			for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if n := runtime.NumGoroutine(); n > before {
				buf := make([]byte, 1<<20)
				t.Fatalf("goroutines: %d before Run, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
			}
		})
	}
}
