package watch_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/panicky"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

// brokenDB is a DB whose first reads misbehave, as told by do (panic, or
// block without regard for the context), and then work.
type brokenDB struct {
	jobguard.DB
	left *atomic.Int64 // reads still to break
	do   func()
}

func (d brokenDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if d.left.Add(-1) >= 0 {
		d.do()
	}
	return d.DB.Query(ctx, sql, args...)
}

func (d brokenDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if d.left.Add(-1) >= 0 {
		d.do()
	}
	return d.DB.QueryRow(ctx, sql, args...)
}

// checked starts a watcher over db that notices nothing by notice (its
// channel is one nobody publishes on) and checks every 20ms, watches a
// job, reclaims it behind the watcher's back, and returns the watched
// context and the watcher's logs.
func checked(t *testing.T, db func(jobguard.DB) jobguard.DB) (context.Context, *testenv.Logs) {
	t.Helper()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	logs := &testenv.Logs{}
	w, err := watch.New(watch.Config{
		Guard: jobs.Guard, DB: db(env.Pool), Transport: watch.Transport{Redis: env.Redis},
		CheckInterval: 20 * time.Millisecond, Logger: logs.Logger(),
	})
	require.NoError(t, err)
	exec := jobguard.Execution{JobID: jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
	ctx, release := w.Watch(context.Background(), exec)
	t.Cleanup(release)
	run(t, w)
	require.NoError(t, jobs.Guard.Fail(context.Background(), env.Pool, exec, jobguard.ReclaimedReasonDefault))
	return ctx, logs
}

// A check whose read panics is a failed check, logged with the stack; the
// loop goes on, and the next check cancels the lost execution.
func TestRun_CheckThatPanicsFailsAndTheNextCheckRuns(t *testing.T) {
	t.Parallel()
	var left atomic.Int64
	left.Store(2)
	ctx, logs := checked(t, func(db jobguard.DB) jobguard.DB {
		return brokenDB{DB: db, left: &left, do: func() { panic("boom") }}
	})
	_, _ = cancelledWithin(t, ctx, time.Now(), 30*time.Second)
	out := logs.String()
	require.Contains(t, out, `level=WARN msg="watch: check failed; trying again at the next interval"`)
	require.Contains(t, out, `panic=boom`)
	require.Contains(t, out, `brokenDB.Query`, "the stack is logged")
}

// A check whose read ignores its context cannot stop the checks: it is
// abandoned a moment after its timeout, and the next check runs.
func TestRun_CheckThatBlocksIsAbandonedAndTheNextCheckRuns(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var left atomic.Int64
	left.Store(1)
	ctx, logs := checked(t, func(db jobguard.DB) jobguard.DB {
		return brokenDB{DB: db, left: &left, do: func() { <-release }}
	})
	_, _ = cancelledWithin(t, ctx, time.Now(), 30*time.Second)
	require.Contains(t, logs.String(), "abandoned")
}

// brokenRedis panics at its first Subscribe, then subscribes.
type brokenRedis struct {
	watch.Redis
	left *atomic.Int64
}

func (r brokenRedis) Subscribe(ctx context.Context, channels ...string) *redis.PubSub {
	if r.left.Add(-1) >= 0 {
		panic("boom")
	}
	return r.Redis.Subscribe(ctx, channels...)
}

// A subscription that panics is a lost subscription: logged with the
// stack, resubscribed after the backoff, and notices then arrive.
func TestRun_SubscriptionThatPanicsIsResubscribed(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	var left atomic.Int64
	left.Store(1)
	b := setup(t, "redis", fixture.Default, watch.Config{
		Transport: watch.Transport{Redis: brokenRedis{Redis: env.Redis, left: &left}}, CheckInterval: time.Hour,
	})
	exec := b.start(t, 1)
	ctx := b.watch(t, exec)
	from := b.reclaim(t, true, exec.JobID)
	cause, _ := cancelledWithin(t, ctx, from, 30*time.Second)
	require.Equal(t, watch.ViaNotice, cause.Via)
	require.Contains(t, b.logs.String(), `msg="watch: subscription lost; reconnecting"`)
	require.Contains(t, b.logs.String(), `brokenRedis.Subscribe`, "the stack is logged")
}

// A logger that panics at every line cannot stop the watcher: notices
// still cancel lost executions, one after another, and Run returns when
// its context ends.
func TestRun_PanickingLoggerDoesNotStopTheWatcher(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	var sw panicky.Switch
	transport := watch.Transport{Redis: env.Redis}
	w, err := watch.New(watch.Config{Guard: jobs.Guard, DB: env.Pool, Transport: transport, CheckInterval: time.Hour,
		Logger: sw.Logger()})
	require.NoError(t, err)
	pub, err := watch.NewPublisher(jobs.Guard, transport)
	require.NoError(t, err)
	run(t, w)
	waitSubscribed(t, w)
	sw.Arm()
	for range 2 {
		exec := jobguard.Execution{JobID: jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
		ctx, release := w.Watch(context.Background(), exec)
		defer release()
		// Publish until the notice lands: the panics may have the watcher
		// between two subscriptions.
		require.Eventually(t, func() bool {
			_ = pub.Publish(context.Background(), watch.Notice{JobID: exec.JobID, Generation: 1})
			return ctx.Err() != nil
		}, testenv.Patience, 20*time.Millisecond)
	}
}
