package riverguard_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/riverguard"
	"github.com/jobguard/jobguard/watch"
)

func TestWork_HealthyJobCompletesAtItsGeneration(t *testing.T) {
	t.Parallel()
	for _, v := range fixture.Variants {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			var b *bundle
			seen := make(chan jobguard.Execution, 1)
			b = setup(t, func(ctx context.Context, _ *river.Job[chapterArgs]) error {
				exec, _ := riverguard.Execution(ctx)
				seen <- exec
				return b.save(ctx)
			}, options{Variant: v})
			id := b.queue(t)
			args := chapterArgs{JobID: id}
			if v.Name == fixture.IntID.Name {
				n, err := strconv.ParseInt(id, 10, 64)
				require.NoError(t, err)
				args.JobID = n // a JSON integer names an integer id
			}
			riverID := b.insert(t, args)

			ev := b.await(t, riverID)
			require.Equal(t, river.EventKindJobCompleted, ev.Kind, "River job: %s", ev.Job.State)
			exec := <-seen
			require.Equal(t, id, exec.JobID)
			row := b.jobs.Read(t, id)
			require.Equal(t, b.jobs.Table.Statuses.Completed, row.Status)
			require.Equal(t, row.Generation, exec.Generation, "completed at the execution's generation")
			if b.jobs.Table.GenerationColumn != "" {
				require.Equal(t, int64(1), exec.Generation, "the start bumped the generation")
			}
			require.Equal(t, 1, b.chapters(t, id))
			require.Equal(t, rivertype.JobStateCompleted, b.riverJob(t, riverID).State)
		})
	}
}

func TestWork_ReclaimedJobsLateSaveIsRefusedAndCancelled(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}, 2), make(chan struct{})
	var b *bundle
	b = setup(t, func(ctx context.Context, _ *river.Job[chapterArgs]) error {
		started <- struct{}{}
		select { // the model call, slow enough to be reclaimed
		case <-release:
		case <-ctx.Done():
		}
		return b.save(ctx)
	}, options{})
	id := b.queue(t)
	riverID := b.insert(t, chapterArgs{JobID: id})
	waitFor(t, started, "the worker to start")
	b.reclaim(t, id)
	close(release)

	ev := b.await(t, riverID)
	require.Equal(t, river.EventKindJobCancelled, ev.Kind, "River job: %s", ev.Job.State)
	job := b.riverJob(t, riverID)
	require.Equal(t, rivertype.JobStateCancelled, job.State, "cancelled, not retried")
	require.Equal(t, 1, job.Attempt)
	require.Contains(t, lastError(t, job), "job is FAILED")
	require.Equal(t, int32(1), b.worker.calls.Load())
	row := b.jobs.Read(t, id)
	require.Equal(t, b.jobs.Table.Statuses.Failed, row.Status, "the reclaim stands")
	require.Equal(t, jobguard.ReclaimedReasonDefault, row.Reason)
	require.Zero(t, b.chapters(t, id), "no product row for a job that is not COMPLETED")
}

func TestWork_RedeliveryOfReclaimedJobIsRefusedAtStart(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}, 2), make(chan struct{})
	b := setup(t, func(ctx context.Context, _ *river.Job[chapterArgs]) error {
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return errors.New("model call timed out") // River retries this
	}, options{})
	id := b.queue(t)
	riverID := b.insert(t, chapterArgs{JobID: id})
	waitFor(t, started, "the worker to start")
	b.reclaim(t, id)
	close(release)

	ev := b.await(t, riverID)
	require.Equal(t, river.EventKindJobFailed, ev.Kind, "the worker's own error is retried")
	ev = b.await(t, riverID)
	require.Equal(t, river.EventKindJobCancelled, ev.Kind, "River job: %s", ev.Job.State)
	job := b.riverJob(t, riverID)
	require.Equal(t, rivertype.JobStateCancelled, job.State)
	require.Equal(t, 2, job.Attempt, "River delivered it again")
	require.Equal(t, int32(1), b.worker.calls.Load(), "the redelivery never reached the worker")
	require.Contains(t, lastError(t, job), "riverguard: river job "+strconv.FormatInt(riverID, 10))
	require.Contains(t, lastError(t, job), jobguard.ErrReclaimed.Error())
	row := b.jobs.Read(t, id)
	require.Equal(t, b.jobs.Table.Statuses.Failed, row.Status)
	require.Equal(t, int64(1), row.Generation, "the refused start bumped nothing")
}

func TestWork_WatcherCancelsTheWorkerOfAReclaimedJob(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 2)
	cause := make(chan error, 2)
	b := setup(t, func(ctx context.Context, _ *river.Job[chapterArgs]) error {
		started <- struct{}{}
		select {
		case <-ctx.Done(): // the model call honours its context
			cause <- context.Cause(ctx)
			return ctx.Err() // an ordinary error, as a cancelled call returns
		case <-time.After(10 * time.Second):
			cause <- nil
			return errors.New("the worker's context was not cancelled")
		}
	}, options{Watch: true})
	id := b.queue(t)
	riverID := b.insert(t, chapterArgs{JobID: id})
	waitFor(t, started, "the worker to start")
	b.reclaim(t, id) // publishes the reclaim's notice

	ev := b.await(t, riverID)
	require.Equal(t, river.EventKindJobCancelled, ev.Kind, "River job: %s", ev.Job.State)
	var lost *watch.LostError
	require.ErrorAs(t, <-cause, &lost)
	require.Equal(t, watch.ViaNotice, lost.Via)
	require.Equal(t, int64(1), lost.Generation)
	job := b.riverJob(t, riverID)
	require.Equal(t, rivertype.JobStateCancelled, job.State)
	require.Equal(t, 1, job.Attempt)
	require.Contains(t, lastError(t, job), "was reclaimed (notice for generation 1)")
	require.Contains(t, lastError(t, job), "the worker returned: context canceled")
	require.Equal(t, b.jobs.Table.Statuses.Failed, b.jobs.Read(t, id).Status)
}

func TestWork_RetryableErrorsAreRetried(t *testing.T) {
	t.Parallel()

	t.Run("the worker's error", func(t *testing.T) {
		t.Parallel()
		var b *bundle
		b = setup(t, func(ctx context.Context, job *river.Job[chapterArgs]) error {
			if job.Attempt == 1 {
				return errors.New("model unavailable")
			}
			return b.save(ctx)
		}, options{})
		id := b.queue(t)
		riverID := b.insert(t, chapterArgs{JobID: id})

		ev := b.await(t, riverID)
		require.Equal(t, river.EventKindJobFailed, ev.Kind, "River job: %s", ev.Job.State)
		ev = b.await(t, riverID)
		require.Equal(t, river.EventKindJobCompleted, ev.Kind, "River job: %s", ev.Job.State)
		require.Equal(t, 2, ev.Job.Attempt)
		row := b.jobs.Read(t, id)
		require.Equal(t, b.jobs.Table.Statuses.Completed, row.Status)
		require.Equal(t, int64(2), row.Generation, "the retry started a new execution")
		require.Equal(t, 1, b.chapters(t, id))
	})

	for _, c := range []struct {
		name, err string
		opts      func(t *testing.T) options
	}{
		{"database unreachable at start", "riverguard: river job", func(t *testing.T) options {
			return options{DB: unreachablePool(t), StartGuard: jobguard.StartGuardConfig{OnLookupError: jobguard.FailClosed}}
		}},
		{"marker lookup failed under FailClosed", jobguard.ErrGuardUnavailable.Error(), func(t *testing.T) options {
			rdb := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1})
			t.Cleanup(func() { _ = rdb.Close() })
			return options{Redis: rdb, StartGuard: jobguard.StartGuardConfig{OnLookupError: jobguard.FailClosed}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(context.Context, *river.Job[chapterArgs]) error { return nil }, c.opts(t))
			id := b.queue(t)
			res, err := b.client.Insert(context.Background(), chapterArgs{JobID: id}, &river.InsertOpts{MaxAttempts: 2})
			require.NoError(t, err)
			riverID := res.Job.ID

			// Retried at once, then out of attempts: never cancelled.
			ev := b.await(t, riverID)
			require.Equal(t, river.EventKindJobFailed, ev.Kind, "River job: %s", ev.Job.State)
			require.Contains(t, []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStateRetryable}, ev.Job.State)
			ev = b.await(t, riverID)
			require.Equal(t, river.EventKindJobFailed, ev.Kind, "River job: %s", ev.Job.State)
			require.Equal(t, rivertype.JobStateDiscarded, ev.Job.State)
			job := b.riverJob(t, riverID)
			require.Equal(t, 2, job.Attempt)
			require.Contains(t, lastError(t, job), c.err)
			require.Zero(t, b.worker.calls.Load(), "a job that was not started is not worked")
			require.Equal(t, b.jobs.Table.Statuses.Queued, b.jobs.Read(t, id).Status)
		})
	}
}

func TestWork_ArgsThatDoNotNameARowAreCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t, func(context.Context, *river.Job[chapterArgs]) error { return nil }, options{})
	for _, c := range []struct {
		args rawArgs
		err  string
	}{
		{`{}`, `args do not name a row: no key "job_id"`},
		{`{"job_id": ""}`, `args do not name a row: key "job_id" is an empty string`},
		{`{"job_id": 1.5}`, `args do not name a row: key "job_id" is 1.5; want a string or an integer`},
		{`{"job_id": "course-1"}`, jobguard.ErrInvalidJobID.Error()}, // not a uuid, as the id column is
		{rawArgs(`{"job_id": "` + uuid.NewString() + `"}`), "no such job"},
	} {
		riverID := b.insert(t, c.args)
		ev := b.await(t, riverID)
		require.Equal(t, river.EventKindJobCancelled, ev.Kind, "%s: River job %s", c.args, ev.Job.State)
		require.Contains(t, lastError(t, b.riverJob(t, riverID)), c.err, c.args)
	}
	require.Zero(t, b.worker.calls.Load())
}

func TestWork_RowIDKeyNamesTheKey(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	starts, err := jobguard.NewStartGuard(jobs.NoRedis(t), nil, jobguard.StartGuardConfig{})
	require.NoError(t, err)
	mw, err := riverguard.New(riverguard.Config{StartGuard: starts, DB: env.Pool, RowIDKey: "row", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	id := jobs.Insert(t, fixture.Job{Status: jobs.Table.Statuses.Queued})

	var got jobguard.Execution
	err = mw.Work(context.Background(), &rivertype.JobRow{ID: 7, Kind: "chapter", EncodedArgs: []byte(`{"job_id": "x", "row": "` + id + `"}`)},
		func(ctx context.Context) error {
			got, _ = riverguard.Execution(ctx)
			return nil
		})
	require.NoError(t, err)
	require.Equal(t, jobguard.Execution{JobID: id, Generation: 1}, got)
}

func TestWork_KindsLeavesOtherKindsAlone(t *testing.T) {
	t.Parallel()

	t.Run("listed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(context.Context, *river.Job[chapterArgs]) error { return nil }, options{Kinds: []string{"chapter"}})
		riverID := b.insert(t, emailArgs{To: "someone@example.com"})
		require.Equal(t, river.EventKindJobCompleted, b.await(t, riverID).Kind)
		require.False(t, <-b.email.sawExecution, "an unguarded kind runs without an execution")
	})
	t.Run("every kind by default", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(context.Context, *river.Job[chapterArgs]) error { return nil }, options{})
		riverID := b.insert(t, emailArgs{To: "someone@example.com"})
		ev := b.await(t, riverID)
		require.Equal(t, river.EventKindJobCancelled, ev.Kind, "its args name no row")
		require.Contains(t, lastError(t, b.riverJob(t, riverID)), `no key "job_id"`)
	})
}

func TestNew_ErrorsNameTheField(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	starts, err := jobguard.NewStartGuard(jobs.NoRedis(t), nil, jobguard.StartGuardConfig{})
	require.NoError(t, err)
	tx, err := env.Pool.Begin(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	conn, err := env.Pool.Acquire(context.Background()) // a BEGIN sent on it by hand
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), "ROLLBACK"); conn.Release() })
	_, err = conn.Exec(context.Background(), "BEGIN")
	require.NoError(t, err)

	for _, c := range []struct {
		cfg  riverguard.Config
		want string
	}{
		{riverguard.Config{DB: env.Pool}, "riverguard: new: StartGuard is nil"},
		{riverguard.Config{StartGuard: starts}, "riverguard: new: DB is nil"},
		{riverguard.Config{StartGuard: starts, DB: tx}, "riverguard: new: DB is a pgx.Tx"},
		{riverguard.Config{StartGuard: starts, DB: conn}, "riverguard: new: DB is a connection with a transaction open"},
		{riverguard.Config{StartGuard: starts, DB: env.Pool, RowIDKey: "a\x00b"}, "riverguard: new: RowIDKey"},
		{riverguard.Config{StartGuard: starts, DB: env.Pool, Kinds: []string{"chapter", ""}}, "riverguard: new: Kinds[1] is empty"},
	} {
		_, err := riverguard.New(c.cfg)
		require.ErrorContains(t, err, c.want)
	}
	_, err = riverguard.New(riverguard.Config{StartGuard: starts, DB: env.Pool})
	require.NoError(t, err, "every other field has a default")
}
