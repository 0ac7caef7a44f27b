package asynqguard_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/asynqguard"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

func TestMiddleware_HealthyTaskCompletes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.jobs.Insert(t, fixture.Job{Status: "QUEUED"})
	seen := make(chan jobguard.Execution, 1)
	b.serve(t, asynqguard.Config{}, func(ctx context.Context, _ *asynq.Task) error {
		exec, ok := asynqguard.Execution(ctx)
		if !ok {
			return errors.New("no execution in the handler's context")
		}
		seen <- exec
		return b.save(ctx, exec)
	})

	task := b.enqueue(t, payload(id))

	info := b.settled(t, task)
	require.Equal(t, asynq.TaskStateCompleted, info.State, info.LastErr)
	require.Zero(t, info.Retried)
	require.Equal(t, jobguard.Execution{JobID: id, Generation: 1}, recv(t, seen, "execution"))
	row := b.jobs.Read(t, id)
	require.Equal(t, "COMPLETED", row.Status)
	require.EqualValues(t, 1, row.Generation, "completed at the generation its start gave it")
	require.Equal(t, 2, b.chapters(t, id))
}

// TestMiddleware_EveryTableShape runs the middleware over every jobs-table
// shape (uuid, text and integer ids, status-only mode), calling it the way
// asynq's server does, with an integer id as a JSON number.
func TestMiddleware_EveryTableShape(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		starts, err := jobguard.NewStartGuard(jobs.Guard, jobs.Env.Redis, jobguard.StartGuardConfig{})
		require.NoError(t, err)
		mw, err := asynqguard.New(asynqguard.Config{StartGuard: starts, DB: jobs.Env.Pool})
		require.NoError(t, err)
		id := jobs.Insert(t, fixture.Job{Status: jobs.Table.Statuses.Queued})
		data := fmt.Appendf(nil, `{"job_id": %q}`, id)
		if _, err := strconv.ParseInt(id, 10, 64); err == nil {
			data = fmt.Appendf(nil, `{"job_id": %s}`, id)
		}

		h := mw(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			exec, ok := asynqguard.Execution(ctx)
			if !ok {
				return errors.New("no execution in the handler's context")
			}
			return jobs.Guard.CompleteTx(ctx, jobs.Env.Pool, exec, func(pgx.Tx) error { return nil })
		}))
		require.NoError(t, h.ProcessTask(ctx, asynq.NewTask(taskType, data)))

		row := jobs.Read(t, id)
		require.Equal(t, jobs.Table.Statuses.Completed, row.Status)
		if jobs.Guard.Fenced() {
			require.EqualValues(t, 1, row.Generation)
		}
	})
}

func TestMiddleware_TaskIDNamesTheRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.jobs.Insert(t, fixture.Job{Status: "QUEUED"})
	b.serve(t, asynqguard.Config{IDFrom: asynqguard.IDFromTaskID}, func(ctx context.Context, _ *asynq.Task) error {
		exec, ok := asynqguard.Execution(ctx)
		if !ok {
			return errors.New("no execution in the handler's context")
		}
		return b.save(ctx, exec)
	})

	task := b.enqueue(t, map[string]int{"weeks": 2}, asynq.TaskID(id))

	info := b.settled(t, task)
	require.Equal(t, asynq.TaskStateCompleted, info.State, info.LastErr)
	require.Equal(t, "COMPLETED", b.jobs.Read(t, id).Status)
}

func TestMiddleware_ReclaimedJobsLateSaveIsRefusedNotRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.jobs.Insert(t, fixture.Job{Status: "QUEUED"})
	var n calls
	started := make(chan jobguard.Execution, 1)
	proceed := make(chan struct{})
	b.serve(t, asynqguard.Config{}, func(ctx context.Context, _ *asynq.Task) error {
		n.add()
		exec, ok := asynqguard.Execution(ctx)
		if !ok {
			return errors.New("no execution in the handler's context")
		}
		started <- exec
		<-proceed // the model call is slow
		return b.save(ctx, exec)
	})
	task := b.enqueue(t, payload(id))

	exec := recv(t, started, "start of the handler")
	b.reclaim(t, id, nil) // meanwhile the reclaimer fails the job
	close(proceed)        // and then the model call returns

	info := b.settled(t, task)
	require.Equal(t, asynq.TaskStateArchived, info.State, "refused: archived, not retried")
	require.Zero(t, info.Retried)
	require.Contains(t, info.LastErr, "job is FAILED")
	require.EqualValues(t, 1, n.get())
	require.Zero(t, b.chapters(t, id), "no product rows for a reclaimed job")
	row := b.jobs.Read(t, id)
	require.Equal(t, "FAILED", row.Status)
	require.Equal(t, jobguard.ReclaimedReasonDefault, row.Reason)
	require.Equal(t, exec.Generation, row.Generation)
}

func TestMiddleware_RedeliveryOfReclaimedJobIsRefusedAtStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// An earlier delivery started the job and hung; the reclaimer failed it.
	id := b.jobs.Insert(t, fixture.Job{Generation: 1})
	b.reclaim(t, id, nil)
	var n calls
	b.serve(t, asynqguard.Config{}, nowhere(&n))

	task := b.enqueue(t, payload(id)) // asynq delivers it again

	info := b.settled(t, task)
	require.Equal(t, asynq.TaskStateArchived, info.State)
	require.Zero(t, info.Retried)
	require.Contains(t, info.LastErr, "job was reclaimed")
	require.Zero(t, n.get(), "the handler is not called")
	row := b.jobs.Read(t, id)
	require.Equal(t, "FAILED", row.Status)
	require.EqualValues(t, 1, row.Generation)
}

func TestMiddleware_ArchivedTaskRunsAgainAfterRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.jobs.Insert(t, fixture.Job{Generation: 1})
	b.reclaim(t, id, nil)
	var n calls
	b.serve(t, asynqguard.Config{}, func(ctx context.Context, _ *asynq.Task) error {
		n.add()
		exec, _ := asynqguard.Execution(ctx)
		return b.save(ctx, exec)
	})
	task := b.enqueue(t, payload(id))
	require.Equal(t, asynq.TaskStateArchived, b.settled(t, task).State)

	// An operator retries the row, then runs the archived task again.
	_, err := b.jobs.Guard.Retry(context.Background(), b.env.Pool, id)
	require.NoError(t, err)
	require.NoError(t, b.insp.RunTask(b.queue, task))

	info := b.await(t, task, "completed", func(ti *asynq.TaskInfo) bool { return ti.State == asynq.TaskStateCompleted })
	require.Zero(t, info.Retried)
	require.EqualValues(t, 1, n.get())
	row := b.jobs.Read(t, id)
	require.Equal(t, "COMPLETED", row.Status)
	require.EqualValues(t, 3, row.Generation, "1 reclaimed, 2 retried, 3 started")
	require.Equal(t, 2, b.chapters(t, id))
}

func TestMiddleware_ReclaimNoticeCancelsHandlerNotRetried(t *testing.T) {
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
	b.reclaim(t, id, pub)

	var lost *watch.LostError
	require.ErrorAs(t, recv(t, causes, "end of the handler"), &lost)
	require.Equal(t, watch.ViaNotice, lost.Via)
	require.Equal(t, exec, jobguard.Execution{JobID: lost.JobID, Generation: lost.Generation})
	info := b.settled(t, task)
	require.Equal(t, asynq.TaskStateArchived, info.State)
	require.Zero(t, info.Retried)
	require.Contains(t, info.LastErr, "was reclaimed (notice for generation 1)")
	require.Contains(t, info.LastErr, "model call: context canceled")
	require.EqualValues(t, 1, n.get())
	require.Zero(t, w.Len(), "the execution is released")
}

func TestMiddleware_HandlerErrorIsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.jobs.Insert(t, fixture.Job{Status: "QUEUED"})
	var n calls
	b.serve(t, asynqguard.Config{}, func(ctx context.Context, _ *asynq.Task) error {
		n.add()
		exec, ok := asynqguard.Execution(ctx)
		if !ok {
			return errors.New("no execution in the handler's context")
		}
		if n.get() == 1 {
			return errors.New("model call: 503 from the provider")
		}
		return b.save(ctx, exec)
	})

	task := b.enqueue(t, payload(id))

	info := b.settled(t, task)
	require.Equal(t, asynq.TaskStateCompleted, info.State, info.LastErr)
	require.Equal(t, 1, info.Retried)
	require.EqualValues(t, 2, n.get())
	row := b.jobs.Read(t, id)
	require.Equal(t, "COMPLETED", row.Status)
	require.EqualValues(t, 2, row.Generation, "the retry started a new execution")
	require.Equal(t, 2, b.chapters(t, id))
}

func TestMiddleware_FailClosedLookupErrorIsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The start guard's Redis: connections fail (refused) while down.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close())
	opt, err := redis.ParseURL(b.env.RedisURL)
	require.NoError(t, err)
	var down atomic.Bool
	down.Store(true)
	opt.MaxRetries = -1
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if down.Load() {
			addr = dead
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	markers := redis.NewClient(opt)
	t.Cleanup(func() { _ = markers.Close() })
	starts, err := jobguard.NewStartGuard(b.jobs.Guard, markers, jobguard.StartGuardConfig{OnLookupError: jobguard.FailClosed})
	require.NoError(t, err)

	id := b.jobs.Insert(t, fixture.Job{Status: "QUEUED"})
	var n calls
	b.serve(t, asynqguard.Config{StartGuard: starts}, func(ctx context.Context, _ *asynq.Task) error {
		n.add()
		exec, _ := asynqguard.Execution(ctx)
		return b.save(ctx, exec)
	})
	task := b.enqueue(t, payload(id))

	info := b.await(t, task, "retried twice", func(ti *asynq.TaskInfo) bool { return ti.Retried >= 2 })
	require.Contains(t, info.LastErr, "start guard lookup failed")
	require.Zero(t, n.get(), "nothing runs while the guard cannot look")
	row := b.jobs.Read(t, id)
	require.Equal(t, "QUEUED", row.Status)
	require.Zero(t, row.Generation)

	down.Store(false) // Redis is back: the next retry starts the job

	info = b.settled(t, task)
	require.Equal(t, asynq.TaskStateCompleted, info.State, info.LastErr)
	require.EqualValues(t, 1, n.get())
	require.Equal(t, "COMPLETED", b.jobs.Read(t, id).Status)
}

func TestMiddleware_PayloadWithoutRowIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var n calls
	b.serve(t, asynqguard.Config{}, nowhere(&n))

	task := b.enqueue(t, map[string]int{"weeks": 2})

	info := b.settled(t, task)
	require.Equal(t, asynq.TaskStateArchived, info.State)
	require.Zero(t, info.Retried)
	require.Contains(t, info.LastErr, `task `+task+` (chapter): jobguard: invalid job id: the payload does not name a row: no key "job_id"`)
	require.Zero(t, n.get())
}

func TestNew_ErrorsNameTheField(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tx, err := b.env.Pool.Begin(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	conn, err := b.env.Pool.Acquire(context.Background()) // a BEGIN sent on it by hand
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), "ROLLBACK"); conn.Release() })
	_, err = conn.Exec(context.Background(), "BEGIN")
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		cfg   asynqguard.Config
		field string
	}{
		{"no start guard", asynqguard.Config{DB: b.env.Pool}, "StartGuard is nil"},
		{"no db", asynqguard.Config{StartGuard: b.starts}, "DB is nil"},
		{"a transaction", asynqguard.Config{StartGuard: b.starts, DB: tx}, "DB is a pgx.Tx"},
		{"a connection in a transaction", asynqguard.Config{StartGuard: b.starts, DB: conn}, "DB is a connection with a transaction open"},
		{"unknown id source", asynqguard.Config{StartGuard: b.starts, DB: b.env.Pool, IDFrom: 7}, "IDFrom 7"},
		{"payload key with task ids", asynqguard.Config{StartGuard: b.starts, DB: b.env.Pool, IDFrom: asynqguard.IDFromTaskID, PayloadKey: "id"}, "PayloadKey"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mw, err := asynqguard.New(tc.cfg)
			require.ErrorContains(t, err, tc.field)
			require.Nil(t, mw)
		})
	}
}

func TestExecution_OutsideTheMiddleware(t *testing.T) {
	t.Parallel()
	_, ok := asynqguard.Execution(context.Background())
	require.False(t, ok)
}
