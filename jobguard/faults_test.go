package jobguard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/chaos"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
)

// privateRedis starts a redis-server of the test's own, so the test can
// stop it without touching the shared one.
func privateRedis(t *testing.T) (*chaos.RedisServer, *redis.Client) {
	t.Helper()
	srv, err := chaos.StartRedis(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return srv, rdb
}

func TestFaults_RedisDown_FailOpenStartsWithWarningAndDatabaseReasonStillRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	jobs := fixture.Create(t, testenv.New(t), fixture.Default)
	srv, rdb := privateRedis(t)
	var logs testenv.Logs
	starts, err := jobguard.NewStartGuard(jobs.Guard, rdb, jobguard.StartGuardConfig{
		Logger: logs.Logger(),
	})
	require.NoError(t, err)
	queued := jobs.Insert(t, fixture.Job{Status: "QUEUED"})
	reclaimed := jobs.Insert(t, fixture.Job{Status: "PROCESSING", Generation: 4, Reason: jobguard.ReclaimedReasonDefault})
	require.NoError(t, srv.Stop())

	exec, err := starts.Start(ctx, jobs.Env.Pool, queued)
	require.NoError(t, err, "fail-open lets the job through while Redis is down")
	require.Equal(t, int64(1), exec.Generation)
	require.Contains(t, logs.String(), "start guard lookup failed")
	require.Contains(t, logs.String(), "job_id="+queued)

	_, err = starts.Start(ctx, jobs.Env.Pool, reclaimed)
	var re *jobguard.ReclaimedError
	require.ErrorAs(t, err, &re, "the database reason refuses without Redis")
	require.Equal(t, "database", re.Source)
	require.True(t, jobguard.IsPermanent(err))
	require.Equal(t, fixture.Row{Status: "PROCESSING", Generation: 4, Reason: jobguard.ReclaimedReasonDefault},
		withoutTime(jobs.Read(t, reclaimed)))
}

func TestFaults_RedisDown_FailClosedRefusesRetryablyAndStartsOnceRedisReturns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	jobs := fixture.Create(t, testenv.New(t), fixture.Default)
	srv, rdb := privateRedis(t)
	starts, err := jobguard.NewStartGuard(jobs.Guard, rdb, jobguard.StartGuardConfig{
		OnLookupError: jobguard.FailClosed,
	})
	require.NoError(t, err)
	id := jobs.Insert(t, fixture.Job{Status: "QUEUED"})
	require.NoError(t, srv.Stop())

	_, err = starts.Start(ctx, jobs.Env.Pool, id)
	require.ErrorIs(t, err, jobguard.ErrGuardUnavailable)
	require.False(t, jobguard.IsPermanent(err), "a queue should try again later")
	require.Equal(t, fixture.Row{Status: "QUEUED"}, withoutTime(jobs.Read(t, id)), "a refused start writes nothing")
	require.ErrorIs(t, starts.Check(ctx, jobs.Env.Pool, id), jobguard.ErrGuardUnavailable)

	require.NoError(t, srv.Start())
	exec, err := starts.Start(ctx, jobs.Env.Pool, id)
	require.NoError(t, err)
	require.Equal(t, int64(1), exec.Generation)
}

func TestFaults_RedisRestart_KeepsMarkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	jobs := fixture.Create(t, testenv.New(t), fixture.Default)
	srv, rdb := privateRedis(t)
	starts, err := jobguard.NewStartGuard(jobs.Guard, rdb, jobguard.StartGuardConfig{
		OnLookupError: jobguard.FailClosed,
	})
	require.NoError(t, err)
	// A late worker overwrote the database reason; only the marker knows.
	id := jobs.Insert(t, fixture.Job{Status: "PROCESSING", Generation: 2, Reason: "worker: done"})
	require.NoError(t, starts.Markers().Write(ctx, marker.Marker{JobID: id, Generation: 2, Reason: jobguard.ReclaimedReasonDefault, At: time.Now()}))

	require.NoError(t, srv.Stop())
	require.NoError(t, srv.Start())

	_, err = starts.Start(ctx, jobs.Env.Pool, id)
	var re *jobguard.ReclaimedError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "marker", re.Source)
	require.Equal(t, int64(2), re.Generation)
}

// terminateInside runs CompleteTx on a pool of its own and terminates that
// transaction's connection from the server side right after the completion,
// before the chapter rows.
func TestFaults_ConnectionTerminatedBetweenCompletionAndChapterRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	env.Exec(`CREATE TABLE chapters (job_id uuid NOT NULL, generation bigint NOT NULL, title text NOT NULL)`)
	starts, err := jobguard.NewStartGuard(jobs.Guard, env.Redis, jobguard.StartGuardConfig{})
	require.NoError(t, err)
	id := jobs.Insert(t, fixture.Job{Status: "QUEUED"})
	exec, err := starts.Start(ctx, env.Pool, id)
	require.NoError(t, err)

	worker := env.Connect(testenv.Config{MaxConns: 1})
	ran := false
	err = jobs.Guard.CompleteTx(ctx, worker, exec, func(tx pgx.Tx) error {
		ran = true
		var pid int32
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return err
		}
		var ok bool
		if err := env.Pool.QueryRow(ctx, `SELECT pg_terminate_backend($1, 5000)`, pid).Scan(&ok); err != nil || !ok {
			return errors.Join(err, errors.New("backend was not terminated"))
		}
		_, err := tx.Exec(ctx, `INSERT INTO chapters (job_id, generation, title) VALUES ($1, $2, 'week 1')`, id, exec.Generation)
		return err
	})
	require.True(t, ran, "the completion was written before the connection died")
	require.Error(t, err)
	require.NotErrorIs(t, err, jobguard.ErrJobTerminal, "a lost connection is not a refusal")
	require.False(t, jobguard.IsPermanent(err))

	var chapters int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM chapters`).Scan(&chapters))
	require.Zero(t, chapters, "nothing of the transaction remains")
	require.Equal(t, fixture.Row{Status: "PROCESSING", Generation: 1}, withoutTime(jobs.Read(t, id)),
		"the completion rolled back with the connection")

	// The queue redelivers; the later attempt fences the first and finishes.
	again, err := starts.Start(ctx, env.Pool, id)
	require.NoError(t, err)
	require.Equal(t, int64(2), again.Generation)
	require.NoError(t, jobs.Guard.CompleteTx(ctx, env.Pool, again, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO chapters (job_id, generation, title) VALUES ($1, $2, 'week 1')`, id, again.Generation)
		return err
	}))
	require.Equal(t, "COMPLETED", jobs.Read(t, id).Status)
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM chapters WHERE generation = 2`).Scan(&chapters))
	require.Equal(t, 1, chapters)
	require.ErrorIs(t, jobs.Guard.CompleteIfActive(ctx, env.Pool, exec), jobguard.ErrJobTerminal, "the first attempt stays fenced out")
}

func TestFaults_GarbageMarker_IsAClearErrorNeverAGuess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	garbage := map[string]func(rdb *redis.Client, key string) error{
		"not json": func(rdb *redis.Client, key string) error { return rdb.Set(ctx, key, "\x00\xffreclaimed?", 0).Err() },
		"negative generation": func(rdb *redis.Client, key string) error {
			return rdb.Set(ctx, key, `{"generation":-3,"reason":"reclaimed"}`, 0).Err()
		},
		"json array": func(rdb *redis.Client, key string) error { return rdb.Set(ctx, key, `[1,2,3]`, 0).Err() },
		"hash":       func(rdb *redis.Client, key string) error { return rdb.HSet(ctx, key, "generation", "1").Err() },
		"list":       func(rdb *redis.Client, key string) error { return rdb.RPush(ctx, key, "x").Err() },
	}
	for name, put := range garbage {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := testenv.New(t)
			jobs := fixture.Create(t, env, fixture.Default)
			var logs testenv.Logs
			open, err := jobguard.NewStartGuard(jobs.Guard, env.Redis, jobguard.StartGuardConfig{
				Logger: logs.Logger(),
			})
			require.NoError(t, err)
			closed, err := jobguard.NewStartGuard(jobs.Guard, env.Redis, jobguard.StartGuardConfig{
				OnLookupError: jobguard.FailClosed,
			})
			require.NoError(t, err)
			id := jobs.Insert(t, fixture.Job{Status: "QUEUED"})
			reclaimed := jobs.Insert(t, fixture.Job{Status: "PROCESSING", Generation: 1, Reason: jobguard.ReclaimedReasonDefault})
			for _, j := range []string{id, reclaimed} {
				require.NoError(t, put(env.Redis, open.Markers().Key(j)))
			}

			_, found, err := open.Markers().Read(ctx, id)
			require.Error(t, err)
			require.False(t, found)
			require.Contains(t, err.Error(), id, "the error names the job")

			_, err = closed.Start(ctx, env.Pool, id)
			require.ErrorIs(t, err, jobguard.ErrGuardUnavailable, "fail-closed does not guess")
			require.Equal(t, "QUEUED", jobs.Read(t, id).Status)

			exec, err := open.Start(ctx, env.Pool, id)
			require.NoError(t, err, "fail-open lets the job through")
			require.Equal(t, int64(1), exec.Generation)
			require.Contains(t, logs.String(), "start guard lookup failed")

			_, err = open.Start(ctx, env.Pool, reclaimed)
			require.ErrorIs(t, err, jobguard.ErrReclaimed, "the database reason still refuses")
		})
	}
}

func withoutTime(r fixture.Row) fixture.Row {
	r.UpdatedAt = time.Time{}
	return r
}

// killedBeforeRead is a transaction whose connection the server ends just
// before its next read, so that the read explaining a refused write fails
// for real.
type killedBeforeRead struct {
	pgx.Tx
	t   *testing.T
	env *testenv.Env
}

func (k killedBeforeRead) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	var pid int32
	require.NoError(k.t, k.Tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	var ok bool
	require.NoError(k.t, k.env.Pool.QueryRow(ctx, `SELECT pg_terminate_backend($1, 5000)`, pid).Scan(&ok))
	require.True(k.t, ok, "the backend was terminated")
	return k.Tx.QueryRow(ctx, sql, args...)
}

// A refused write whose explaining read fails is still a refusal (the
// write affected zero rows), but it must not claim a reason it never saw:
// "the row changed concurrently" is what a read that succeeded found.
func TestFaults_RefusalWhoseExplanationCannotBeReadSaysSo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{Status: "FAILED", Generation: 1, Reason: jobguard.ReclaimedReasonDefault})

	worker := env.Connect(testenv.Config{MaxConns: 1})
	tx, err := worker.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	err = jobs.Guard.Fail(ctx, killedBeforeRead{Tx: tx, t: t, env: env}, jobguard.Execution{JobID: id, Generation: 1}, "late")

	require.ErrorIs(t, err, jobguard.ErrJobTerminal, "zero rows is a refusal, explained or not")
	var se *jobguard.StateError
	require.ErrorAs(t, err, &se)
	require.NotEqual(t, jobguard.ReasonUnknown, se.Reason, "a read that failed saw no concurrent change: %v", err)
	require.NotContains(t, err.Error(), "changed concurrently")
	require.Equal(t, jobguard.ReasonUnread, se.Reason)
}
