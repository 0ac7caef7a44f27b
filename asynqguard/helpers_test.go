package asynqguard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/asynqguard"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
)

// taskType is the asynq task type of the tests' chapter jobs, also their
// job type in the jobs table.
const taskType = "chapter"

// bundle is one test's jobs table, start guard, and asynq queue of its own
// on the real Redis.
type bundle struct {
	env    *testenv.Env
	jobs   *fixture.Jobs
	starts *jobguard.StartGuard
	// queue is the test's own asynq queue; asynq's keys for it are
	// "asynq:{<queue>}:…", deleted at cleanup.
	queue  string
	redis  *redis.Client // asynq's connection
	client *asynq.Client
	insp   *asynq.Inspector
}

// setup creates the default jobs table, a chapters table for the product
// rows, a fail-open start guard, and an asynq client and inspector on a
// queue named after the test's schema.
func setup(t *testing.T) *bundle {
	t.Helper()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	env.Exec(`CREATE TABLE chapters (job_id uuid NOT NULL, n int NOT NULL)`)
	starts, err := jobguard.NewStartGuard(jobs.Guard, env.Redis, jobguard.StartGuardConfig{})
	require.NoError(t, err)

	opt, err := redis.ParseURL(env.RedisURL)
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	b := &bundle{env: env, jobs: jobs, starts: starts, queue: env.Schema, redis: rdb,
		client: asynq.NewClientFromRedisClient(rdb), insp: asynq.NewInspectorFromRedisClient(rdb)}
	t.Cleanup(b.deleteQueue) // after the server's shutdown, registered later
	return b
}

// deleteQueue removes every key asynq keeps for the test's queue.
func (b *bundle) deleteQueue() { deleteQueue(b.redis, b.queue) }

// deleteQueue removes every key asynq keeps for queue: its keys all start
// with "asynq:{<queue>}:", and the queue is a member of "asynq:queues".
func deleteQueue(rdb redis.UniversalClient, queue string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, "asynq:{"+queue+"}:*", 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if len(keys) > 0 {
		_ = rdb.Del(ctx, keys...).Err()
	}
	_ = rdb.SRem(ctx, "asynq:queues", queue).Err()
}

// serve runs an asynq server on the test's queue, with the middleware made
// from cfg (StartGuard and DB default to the bundle's) around h, until the
// test ends. Retries come back after 50ms.
func (b *bundle) serve(t *testing.T, cfg asynqguard.Config, h asynq.HandlerFunc) {
	t.Helper()
	b.server(t, cfg, h, 5*time.Second)
}

// server is serve with the server's ShutdownTimeout, returning the server,
// whose Shutdown a test may call before its end.
func (b *bundle) server(t *testing.T, cfg asynqguard.Config, h asynq.HandlerFunc, shutdown time.Duration) *asynq.Server {
	t.Helper()
	if cfg.StartGuard == nil {
		cfg.StartGuard = b.starts
	}
	if cfg.DB == nil {
		cfg.DB = b.env.Pool
	}
	mw, err := asynqguard.New(cfg)
	require.NoError(t, err)
	mux := asynq.NewServeMux()
	mux.Use(mw)
	mux.Handle(taskType, h)
	srv := asynq.NewServerFromRedisClient(b.redis, asynq.Config{
		Queues:                   map[string]int{b.queue: 1},
		Concurrency:              2,
		TaskCheckInterval:        20 * time.Millisecond,
		DelayedTaskCheckInterval: 50 * time.Millisecond,
		RetryDelayFunc:           func(int, error, *asynq.Task) time.Duration { return 50 * time.Millisecond },
		IsFailure:                asynqguard.IsFailure,
		ShutdownTimeout:          shutdown,
		LogLevel:                 asynq.ErrorLevel,
	})
	require.NoError(t, srv.Start(mux))
	t.Cleanup(srv.Shutdown)
	return srv
}

// enqueue queues a chapter task whose payload is payload (JSON-encoded),
// kept an hour once completed so that the inspector can still read it,
// and returns its task id.
func (b *bundle) enqueue(t *testing.T, payload any, opts ...asynq.Option) string {
	t.Helper()
	data, err := json.Marshal(payload)
	require.NoError(t, err)
	opts = append([]asynq.Option{asynq.Queue(b.queue), asynq.MaxRetry(10), asynq.Retention(time.Hour)}, opts...)
	info, err := b.client.Enqueue(asynq.NewTask(taskType, data), opts...)
	require.NoError(t, err)
	return info.ID
}

// await returns the task once done says so, and fails the test if that
// does not happen within 30 seconds, or at once if asynq is done with the
// task (archived or completed) without done saying so.
func (b *bundle) await(t *testing.T, taskID string, what string, done func(*asynq.TaskInfo) bool) *asynq.TaskInfo {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last *asynq.TaskInfo
	var lastErr error
	for time.Now().Before(deadline) {
		last, lastErr = b.insp.GetTaskInfo(b.queue, taskID)
		if lastErr == nil && done(last) {
			return last
		}
		if lastErr == nil && (last.State == asynq.TaskStateArchived || last.State == asynq.TaskStateCompleted) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if lastErr != nil {
		t.Fatalf("task %s is not %s: %v", taskID, what, lastErr)
	}
	t.Fatalf("task %s is not %s: state %s, retried %d, last error %q", taskID, what, last.State, last.Retried, last.LastErr)
	return nil
}

// settled waits for the task to be archived or completed: asynq is done
// with it either way.
func (b *bundle) settled(t *testing.T, taskID string) *asynq.TaskInfo {
	t.Helper()
	return b.await(t, taskID, "archived or completed", func(ti *asynq.TaskInfo) bool {
		return ti.State == asynq.TaskStateArchived || ti.State == asynq.TaskStateCompleted
	})
}

// save is the handler's save: the guarded completion, then two chapter rows.
func (b *bundle) save(ctx context.Context, exec jobguard.Execution) error {
	return b.jobs.Guard.CompleteTx(ctx, b.env.Pool, exec, func(tx pgx.Tx) error {
		for n := 1; n <= 2; n++ {
			if _, err := tx.Exec(ctx, `INSERT INTO chapters (job_id, n) VALUES ($1, $2)`, exec.JobID, n); err != nil {
				return err
			}
		}
		return nil
	})
}

// chapters counts the product rows of job id.
func (b *bundle) chapters(t *testing.T, id string) int {
	t.Helper()
	var n int
	require.NoError(t, b.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM chapters WHERE job_id = $1`, id).Scan(&n))
	return n
}

// reclaim makes job id look stuck (started and last updated an hour ago,
// over its one-minute limit) and runs one sweep of the reclaimer over the
// jobs table, the source asynq jobs are reclaimed from; notices, when set,
// announces the reclaim.
func (b *bundle) reclaim(t *testing.T, id string, notices reclaim.Notifier) {
	t.Helper()
	b.jobs.Backdate(t, id, b.jobs.Table.StartedAtColumn, time.Hour)
	b.jobs.Backdate(t, id, b.jobs.Table.UpdatedAtColumn, time.Hour)
	src, err := reclaim.NewTableSource(b.jobs.Guard, b.env.Pool)
	require.NoError(t, err)
	logs := &testenv.Logs{}
	cfg := reclaim.Config{
		Guard: b.jobs.Guard, DB: b.env.Pool, Redis: b.env.Redis, Source: src,
		Limits: reclaim.StaticLimits{taskType: time.Minute}, NoProgress: time.Minute,
		Logger: logs.Logger(),
	}
	if notices != nil {
		cfg.Notices = notices
	}
	r, err := reclaim.New(cfg)
	require.NoError(t, err)
	rep, err := r.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Reclaimed, "the reclaimer fails the job: %s", logs)
}

// payload is what the tests' tasks carry: the row id under the default key.
func payload(id string) map[string]string { return map[string]string{asynqguard.PayloadKeyDefault: id} }

// calls counts the handler's calls.
type calls struct{ n atomic.Int32 }

func (c *calls) add()       { c.n.Add(1) }
func (c *calls) get() int32 { return c.n.Load() }

// nowhere is a handler that must not run.
func nowhere(c *calls) asynq.HandlerFunc {
	return func(context.Context, *asynq.Task) error {
		c.add()
		return fmt.Errorf("the handler ran")
	}
}

// recv returns the next value from ch, and fails the test if none comes
// within 30 seconds.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s within 30s", what)
		var zero T
		return zero
	}
}
