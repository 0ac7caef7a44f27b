package watch_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/watch"
)

// transports are the two ways notices travel; every notice test runs on both.
var transports = []string{"redis", "postgres"}

// transportFor returns the test's own transport of kind: a Redis channel
// under the test's prefix, or a Postgres channel named after its schema.
func transportFor(env *testenv.Env, kind string) watch.Transport {
	if kind == "redis" {
		return watch.Transport{Redis: env.Redis}
	}
	return watch.Transport{Postgres: env.Pool}
}

// bundle is one test's jobs table, a running watcher and a publisher on the
// same transport.
type bundle struct {
	env  *testenv.Env
	jobs *fixture.Jobs
	w    *watch.Watcher
	pub  *watch.Publisher
	logs *testenv.Logs
}

// setup creates the jobs table of v, a watcher with cfg (Guard, DB,
// Transport and Logger filled in) and a publisher, runs the watcher until
// the test ends, and waits until it is subscribed.
func setup(t *testing.T, kind string, v fixture.Variant, cfg watch.Config) *bundle {
	t.Helper()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, v)
	if cfg.Transport == (watch.Transport{}) {
		cfg.Transport = transportFor(env, kind)
	}
	b := &bundle{env: env, jobs: jobs, logs: &testenv.Logs{}}
	cfg.Guard, cfg.DB = jobs.Guard, env.Pool
	cfg.Logger = slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w, err := watch.New(cfg)
	require.NoError(t, err)
	b.w = w
	b.pub, err = watch.NewPublisher(jobs.Guard, cfg.Transport)
	require.NoError(t, err)
	run(t, w)
	waitSubscribed(t, w)
	// The check that follows subscribing must not race the test's reclaim.
	require.Eventually(t, func() bool { return watch.Checks(w) > 0 }, 10*time.Second, time.Millisecond)
	return b
}

// run runs w until the test ends and fails the test if Run does not return
// promptly once cancelled.
func run(t *testing.T, w *watch.Watcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Error("Run did not return within 5s of its context ending")
		}
	})
}

func waitSubscribed(t *testing.T, w *watch.Watcher) {
	t.Helper()
	require.Eventually(t, w.Subscribed, 10*time.Second, 5*time.Millisecond, "watcher never subscribed")
}

// start inserts a PROCESSING job at generation gen and returns its
// execution.
func (b *bundle) start(t *testing.T, gen int64) jobguard.Execution {
	t.Helper()
	return jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: gen}), Generation: gen}
}

// watch watches exec until the test ends.
func (b *bundle) watch(t *testing.T, exec jobguard.Execution) context.Context {
	t.Helper()
	ctx, release := b.w.Watch(context.Background(), exec)
	t.Cleanup(release)
	return ctx
}

// reclaim does what a reclaimer does: the conditional batch write of
// FAILED against the rows as read, then a notice for every row it changed
// (none when publish is false). It returns the time the write committed.
func (b *bundle) reclaim(t *testing.T, publish bool, ids ...string) time.Time {
	t.Helper()
	ctx := context.Background()
	rows, err := jobset.New(b.jobs.Guard).Snapshot(ctx, b.env.Pool, ids)
	require.NoError(t, err)
	var expected []jobset.Job
	for _, r := range rows {
		expected = append(expected, r)
	}
	changed, err := jobset.New(b.jobs.Guard).FailIfUnchanged(ctx, b.env.Pool, expected, jobguard.ReclaimedReasonDefault)
	require.NoError(t, err)
	committed := time.Now()
	require.Len(t, changed.Failed, len(ids))
	if publish {
		require.NoError(t, b.pub.Publish(ctx, watch.NoticesFrom(changed.Failed)...))
	}
	return committed
}

// cancelledWithin waits for ctx to end and returns its cause and how long
// after from it ended, logging when that is beyond d.
func cancelledWithin(t *testing.T, ctx context.Context, from time.Time, d time.Duration) (*watch.LostError, time.Duration) {
	t.Helper()
	// d is the figure the test expects on an idle machine; the wait is
	// testenv.Patience, so a loaded machine makes the test slower, not red.
	// How the context was cancelled (cause.Via) is what the test checks.
	select {
	case <-ctx.Done():
	case <-time.After(testenv.Patience):
		t.Fatalf("context not cancelled within %v", testenv.Patience)
	}
	took := time.Since(from)
	if took > d {
		t.Logf("cancelled after %v, beyond the %v expected on an idle machine", took, d)
	}
	cause := context.Cause(ctx)
	require.ErrorIs(t, cause, jobguard.ErrJobTerminal)
	require.True(t, jobguard.IsPermanent(cause))
	var re *watch.LostError
	require.ErrorAs(t, cause, &re)
	return re, took
}

func requireAlive(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	require.NoError(t, ctx.Err(), "%s was cancelled: %v", what, context.Cause(ctx))
}

// redisClient returns a client of addr, closed when the test ends.
func redisClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
