package jobguard_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

// setupFinalize creates the default jobs table and a metadata table the
// updates write to.
func setupFinalize(t *testing.T) *fixture.Jobs {
	t.Helper()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	env.Exec(`CREATE TABLE metadata (job_id text, kind text, PRIMARY KEY (job_id, kind))`)
	return jobs
}

// writeMeta is an update that records kind for the job in the metadata table.
func writeMeta(jobs *fixture.Jobs, id, kind string) jobguard.Update {
	return jobguard.Update{Name: kind, Run: func(ctx context.Context) error {
		_, err := jobs.Env.Pool.Exec(ctx, `INSERT INTO metadata VALUES ($1, $2)`, id, kind)
		return err
	}}
}

func metaKinds(t *testing.T, jobs *fixture.Jobs, id string) []string {
	t.Helper()
	rows, err := jobs.Env.Pool.Query(context.Background(), `SELECT kind FROM metadata WHERE job_id = $1 ORDER BY kind`, id)
	require.NoError(t, err)
	kinds, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return kinds
}

func TestFinalize_AllUpdatesSucceedIsConfirmed(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		jobs.Env.Exec(`CREATE TABLE metadata (job_id text, kind text, PRIMARY KEY (job_id, kind))`)
		id := jobs.Insert(t, fixture.Job{Generation: 2})
		exec := jobguard.Execution{JobID: id, Generation: 2}

		fin, err := jobs.Guard.Finalize(context.Background(), jobs.Env.Pool, exec, jobguard.FinalizeSpec{
			Recheck: func(context.Context) error { return nil },
			Updates: []jobguard.Update{writeMeta(jobs, id, "asset"), writeMeta(jobs, id, "content"), writeMeta(jobs, id, "video")},
		})
		require.NoError(t, err)
		require.True(t, fin.Completed())
		require.True(t, fin.Confirmed())
		require.False(t, fin.Rejected())
		require.Empty(t, fin.Failed())
		require.Equal(t, exec, fin.Execution())
		require.Equal(t, jobs.Table.Statuses.Completed, jobs.Read(t, id).Status)
		require.Equal(t, []string{"asset", "content", "video"}, metaKinds(t, jobs, id))
	})
}

func TestFinalize_ReclaimedJobRunsNoUpdate(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		jobs.Env.Exec(`CREATE TABLE metadata (job_id text, kind text, PRIMARY KEY (job_id, kind))`)
		st := jobs.Table.Statuses
		id := jobs.Insert(t, fixture.Job{Status: st.Failed, Reason: jobguard.ReclaimedReasonDefault, Generation: 1})
		before := jobs.Read(t, id)
		var hook atomic.Bool

		fin, err := jobs.Guard.Finalize(context.Background(), jobs.Env.Pool, jobguard.Execution{JobID: id, Generation: 1}, jobguard.FinalizeSpec{
			Complete: func(context.Context, pgx.Tx) error { hook.Store(true); return nil },
			Updates:  []jobguard.Update{writeMeta(jobs, id, "video"), writeMeta(jobs, id, "asset")},
		})
		require.ErrorIs(t, err, jobguard.ErrJobTerminal)
		require.True(t, fin.Rejected())
		require.False(t, fin.Completed())
		require.False(t, fin.Confirmed())
		require.False(t, hook.Load(), "Complete must not run after a rejected completion")
		require.Empty(t, metaKinds(t, jobs, id), "no metadata update may run after a rejected completion")
		require.Equal(t, before, jobs.Read(t, id))
	})
}

func TestFinalize_SupersededGenerationIsRejectedWhileProcessing(t *testing.T) {
	t.Parallel()
	jobs := setupFinalize(t)
	// The job was restarted by another path: still PROCESSING, but at
	// generation 3; the stale execution holds generation 2.
	id := jobs.Insert(t, fixture.Job{Generation: 3})

	fin, err := jobs.Guard.Finalize(context.Background(), jobs.Env.Pool, jobguard.Execution{JobID: id, Generation: 2}, jobguard.FinalizeSpec{
		Updates: []jobguard.Update{writeMeta(jobs, id, "video")},
	})
	require.ErrorIs(t, err, jobguard.ErrJobTerminal)
	var se *jobguard.StateError
	require.ErrorAs(t, err, &se)
	require.Equal(t, jobguard.ReasonSuperseded, se.Reason)
	require.True(t, fin.Rejected())
	require.False(t, fin.Confirmed())
	row := jobs.Read(t, id)
	require.Equal(t, "PROCESSING", row.Status)
	require.Equal(t, int64(3), row.Generation)
	require.Empty(t, metaKinds(t, jobs, id))
}

func TestFinalize_FailedUpdateKeepsCompletionAndOtherUpdates(t *testing.T) {
	t.Parallel()
	jobs := setupFinalize(t)
	id := jobs.Insert(t, fixture.Job{Generation: 1})
	boom := errors.New("asset store down")

	fin, err := jobs.Guard.Finalize(context.Background(), jobs.Env.Pool, jobguard.Execution{JobID: id, Generation: 1}, jobguard.FinalizeSpec{
		Updates: []jobguard.Update{
			writeMeta(jobs, id, "video"),
			{Name: "asset", Run: func(context.Context) error { return boom }},
			writeMeta(jobs, id, "content"),
		},
	})
	require.ErrorIs(t, err, boom)
	var ue *jobguard.UpdateError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, "asset", ue.Name)
	require.True(t, fin.Completed())
	require.False(t, fin.Confirmed())
	require.False(t, fin.Rejected())
	require.Equal(t, []string{"asset"}, fin.Failed())
	require.Equal(t, "COMPLETED", jobs.Read(t, id).Status, "the completion stays")
	require.Equal(t, []string{"content", "video"}, metaKinds(t, jobs, id), "the successful updates stay")
}

func TestFinalize_ErrorJoinsEveryFailedUpdate(t *testing.T) {
	t.Parallel()
	jobs := setupFinalize(t)
	id := jobs.Insert(t, fixture.Job{Generation: 1})
	errVideo, errAsset := errors.New("video"), errors.New("asset")

	fin, err := jobs.Guard.Finalize(context.Background(), jobs.Env.Pool, jobguard.Execution{JobID: id, Generation: 1}, jobguard.FinalizeSpec{
		Updates: []jobguard.Update{
			{Name: "video", Run: func(context.Context) error { return errVideo }},
			writeMeta(jobs, id, "content"),
			{Name: "asset", Run: func(context.Context) error { return errAsset }},
		},
	})
	require.ErrorIs(t, err, errVideo)
	require.ErrorIs(t, err, errAsset)
	require.Equal(t, []string{"video", "asset"}, fin.Failed())
	require.False(t, fin.Confirmed())
}

func TestFinalize_UpdatesRunInParallelWithTheirOwnContexts(t *testing.T) {
	t.Parallel()
	jobs := setupFinalize(t)
	id := jobs.Insert(t, fixture.Job{Generation: 1})
	aStarted, bStarted, failed := make(chan struct{}), make(chan struct{}), make(chan struct{})
	// Each waits for the other to have started: run one after the other, they
	// would time out.
	meet := func(mine, other chan struct{}) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			close(mine)
			select {
			case <-other:
				return nil
			case <-time.After(5 * time.Second):
				return errors.New("updates did not run in parallel")
			}
		}
	}
	var cancelledByFailure atomic.Bool

	fin, err := jobs.Guard.Finalize(context.Background(), jobs.Env.Pool, jobguard.Execution{JobID: id, Generation: 1}, jobguard.FinalizeSpec{
		Updates: []jobguard.Update{
			{Name: "a", Run: meet(aStarted, bStarted)},
			{Name: "b", Run: meet(bStarted, aStarted)},
			{Name: "fails", Run: func(context.Context) error { defer close(failed); return errors.New("fails") }},
			{Name: "after", Run: func(ctx context.Context) error {
				<-failed
				time.Sleep(10 * time.Millisecond)
				cancelledByFailure.Store(ctx.Err() != nil)
				return ctx.Err()
			}},
		},
	})
	require.Error(t, err)
	require.Equal(t, []string{"fails"}, fin.Failed(), "a, b and after must succeed")
	require.False(t, cancelledByFailure.Load(), "one update failing must not cancel another's context")
}

func TestFinalize_WaitsForEveryUpdate(t *testing.T) {
	t.Parallel()
	jobs := setupFinalize(t)
	id := jobs.Insert(t, fixture.Job{Generation: 1})
	var finished atomic.Int32
	slow := func(d time.Duration, err error) func(context.Context) error {
		return func(context.Context) error {
			time.Sleep(d)
			finished.Add(1)
			return err
		}
	}

	_, err := jobs.Guard.Finalize(context.Background(), jobs.Env.Pool, jobguard.Execution{JobID: id, Generation: 1}, jobguard.FinalizeSpec{
		Updates: []jobguard.Update{
			{Name: "fails-fast", Run: slow(0, errors.New("fails"))},
			{Name: "slow", Run: slow(50*time.Millisecond, nil)},
			{Name: "slower", Run: slow(100*time.Millisecond, nil)},
		},
	})
	require.Error(t, err)
	require.Equal(t, int32(3), finished.Load(), "Finalize returns only after every update has returned")
}

// Every way an update can fail to return normally: a panic (with a
// value, an error, nil, a runtime error) and runtime.Goexit. Each fails
// that update only, visibly, with its stack; the others run; nothing
// panics in the caller, who may be a loop no one else can recover.
func TestFinalize_UpdateThatPanicsOrExitsFailsItAloneWithItsStack(t *testing.T) {
	t.Parallel()
	jobs := setupFinalize(t)
	boom := errors.New("boom error")
	for name, tc := range map[string]struct {
		run   func()
		value func(t *testing.T, v any)
	}{
		"string":  {func() { panic("boom") }, func(t *testing.T, v any) { require.Equal(t, "boom", v) }},
		"error":   {func() { panic(boom) }, func(t *testing.T, v any) { require.Same(t, boom, v) }},
		"nil":     {func() { panic(nil) }, func(t *testing.T, v any) { require.IsType(t, &runtime.PanicNilError{}, v) }},
		"runtime": {func() { var m map[string]int; m["x"]++ }, func(t *testing.T, v any) { require.Implements(t, (*runtime.Error)(nil), v) }},
		"goexit":  {runtime.Goexit, func(t *testing.T, v any) { require.Same(t, jobguard.ErrGoexit, v) }},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			id := jobs.Insert(t, fixture.Job{Generation: 1})
			var fin jobguard.Finalized
			var err error
			require.NotPanics(t, func() {
				fin, err = jobs.Guard.Finalize(context.Background(), jobs.Env.Pool, jobguard.Execution{JobID: id, Generation: 1}, jobguard.FinalizeSpec{
					Updates: []jobguard.Update{
						{Name: "asset", Run: func(context.Context) error { panickingUpdate(tc.run); return nil }},
						writeMeta(jobs, id, "video"),
					},
				})
			})
			require.True(t, fin.Completed())
			require.False(t, fin.Confirmed(), "an update that did not return is not a success")
			require.Equal(t, []string{"asset"}, fin.Failed())
			require.Equal(t, []string{"video"}, metaKinds(t, jobs, id), "the other update ran")
			var ue *jobguard.UpdateError
			require.ErrorAs(t, err, &ue)
			require.Equal(t, "asset", ue.Name)
			var pe *jobguard.PanicError
			require.ErrorAs(t, err, &pe)
			tc.value(t, pe.Value)
			require.Contains(t, string(pe.Stack), "panickingUpdate", "the stack shows where it panicked")
		})
	}
}

// panickingUpdate is a frame of its own, for the stack to show.
func panickingUpdate(run func()) { run() }

// An update that ignores its context cannot hold Finalize past its
// UpdateTimeout: it is abandoned, fails, and Finalize returns. The bound
// is generous enough for the other update's write on a loaded machine.
func TestFinalize_UpdateIgnoringItsContextIsAbandonedAfterUpdateTimeout(t *testing.T) {
	t.Parallel()
	jobs := setupFinalize(t)
	id := jobs.Insert(t, fixture.Job{Generation: 1})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })

	type result struct {
		fin jobguard.Finalized
		err error
	}
	done := make(chan result, 1)
	go func() {
		fin, err := jobs.Guard.Finalize(context.Background(), jobs.Env.Pool, jobguard.Execution{JobID: id, Generation: 1}, jobguard.FinalizeSpec{
			UpdateTimeout: 2 * time.Second,
			Updates: []jobguard.Update{
				{Name: "stuck", Run: func(context.Context) error { <-release; return nil }},
				writeMeta(jobs, id, "video"),
			},
		})
		done <- result{fin, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Finalize still waits for an update that ignores its context, a minute after its 2s UpdateTimeout")
	}
	require.ErrorIs(t, res.err, jobguard.ErrAbandoned)
	require.ErrorIs(t, res.err, context.DeadlineExceeded)
	require.True(t, res.fin.Completed())
	require.False(t, res.fin.Confirmed())
	require.Equal(t, []string{"stuck"}, res.fin.Failed())
	require.Equal(t, []string{"video"}, metaKinds(t, jobs, id))
}

func TestFinalize_UpdateTimeoutBoundsEachUpdate(t *testing.T) {
	t.Parallel()
	jobs := setupFinalize(t)
	id := jobs.Insert(t, fixture.Job{Generation: 1})

	fin, err := jobs.Guard.Finalize(context.Background(), jobs.Env.Pool, jobguard.Execution{JobID: id, Generation: 1}, jobguard.FinalizeSpec{
		UpdateTimeout: 20 * time.Millisecond,
		Updates: []jobguard.Update{{Name: "slow", Run: func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}}},
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, []string{"slow"}, fin.Failed())
	require.True(t, fin.Completed())
}

func TestFinalize_RecheckStopWritesNothing(t *testing.T) {
	t.Parallel()
	jobs := setupFinalize(t)
	id := jobs.Insert(t, fixture.Job{Generation: 1})
	before := jobs.Read(t, id)
	deleted := errors.New("video was deleted")

	fin, err := jobs.Guard.Finalize(context.Background(), jobs.Env.Pool, jobguard.Execution{JobID: id, Generation: 1}, jobguard.FinalizeSpec{
		Recheck: func(context.Context) error { return deleted },
		Updates: []jobguard.Update{writeMeta(jobs, id, "video")},
	})
	require.ErrorIs(t, err, jobguard.ErrStopped)
	require.ErrorIs(t, err, deleted)
	require.False(t, fin.Completed())
	require.False(t, fin.Rejected())
	require.False(t, fin.Confirmed())
	require.Equal(t, before, jobs.Read(t, id))
	require.Empty(t, metaKinds(t, jobs, id))
}

func TestFinalize_CompleteHookErrorRollsBackCompletion(t *testing.T) {
	t.Parallel()
	jobs := setupFinalize(t)
	id := jobs.Insert(t, fixture.Job{Generation: 1})
	boom := errors.New("boom")

	fin, err := jobs.Guard.Finalize(context.Background(), jobs.Env.Pool, jobguard.Execution{JobID: id, Generation: 1}, jobguard.FinalizeSpec{
		Complete: func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO metadata VALUES ($1, 'in-tx')`, id); err != nil {
				return err
			}
			return boom
		},
		Updates: []jobguard.Update{writeMeta(jobs, id, "video")},
	})
	require.ErrorIs(t, err, boom)
	require.False(t, fin.Completed())
	require.False(t, fin.Rejected())
	require.Equal(t, "PROCESSING", jobs.Read(t, id).Status)
	require.Empty(t, metaKinds(t, jobs, id))
}

func TestFinalize_InvalidSpecWritesNothing(t *testing.T) {
	t.Parallel()
	jobs := setupFinalize(t)
	id := jobs.Insert(t, fixture.Job{Generation: 1})
	ok := func(context.Context) error { return nil }
	for name, spec := range map[string]jobguard.FinalizeSpec{
		"Name is empty":    {Updates: []jobguard.Update{{Run: ok}}},
		"Run is nil":       {Updates: []jobguard.Update{{Name: "video"}}},
		"used twice":       {Updates: []jobguard.Update{{Name: "v", Run: ok}, {Name: "v", Run: ok}}},
		"UpdateTimeout -1": {UpdateTimeout: -1},
	} {
		_, err := jobs.Guard.Finalize(context.Background(), jobs.Env.Pool, jobguard.Execution{JobID: id, Generation: 1}, spec)
		require.ErrorContains(t, err, name)
	}
	require.Equal(t, "PROCESSING", jobs.Read(t, id).Status)
}

func TestFinalized_ZeroValueIsNotConfirmed(t *testing.T) {
	t.Parallel()
	var fin jobguard.Finalized
	require.False(t, fin.Confirmed())
	require.False(t, fin.Completed())
	require.False(t, fin.Rejected())
}

func ExampleGuard_Finalize() {
	tb, done := testenv.ExampleTB()
	defer done()
	env := testenv.New(tb)
	jobs := fixture.Create(tb, env, fixture.Default)
	env.Exec(`CREATE TABLE videos (id text PRIMARY KEY, status text NOT NULL, deleted bool NOT NULL DEFAULT false);
	          INSERT INTO videos VALUES ('v1', 'ENCODING')`)
	ctx, pool, guard := context.Background(), env.Pool, jobs.Guard
	exec := jobguard.Execution{JobID: jobs.Insert(tb, fixture.Job{Generation: 1}), Generation: 1}

	fin, err := guard.Finalize(ctx, pool, exec, jobguard.FinalizeSpec{
		// Right before completing: was the video deleted meanwhile?
		Recheck: func(ctx context.Context) error {
			var deleted bool
			if err := pool.QueryRow(ctx, `SELECT deleted FROM videos WHERE id = 'v1'`).Scan(&deleted); err != nil {
				return err
			}
			if deleted {
				return errors.New("video deleted")
			}
			return nil
		},
		// After the completion, in parallel, each in its own transaction.
		Updates: []jobguard.Update{
			{Name: "video", Run: func(ctx context.Context) error {
				_, err := pool.Exec(ctx, `UPDATE videos SET status = 'READY' WHERE id = 'v1'`)
				return err
			}},
			{Name: "asset", Run: func(ctx context.Context) error { return nil }},
		},
	})
	fmt.Println("completed:", fin.Completed(), "confirmed:", fin.Confirmed(), "error:", err)

	// A late execution of a reclaimed job is rejected: nothing is written.
	late := jobguard.Execution{JobID: jobs.Insert(tb, fixture.Job{Status: "FAILED", Generation: 1}), Generation: 1}
	fin, err = guard.Finalize(ctx, pool, late, jobguard.FinalizeSpec{})
	fmt.Println("rejected:", fin.Rejected(), "confirmed:", fin.Confirmed(), errors.Is(err, jobguard.ErrJobTerminal))
	// Output:
	// completed: true confirmed: true error: <nil>
	// rejected: true confirmed: false true
}

func TestFinalize_CallerTransactionThatRollsBackLeavesNothing(t *testing.T) {
	t.Parallel()
	jobs := setupFinalize(t)
	ctx := context.Background()
	id := jobs.Insert(t, fixture.Job{Generation: 1})
	var hook atomic.Bool
	tx, err := jobs.Env.Pool.Begin(ctx)
	require.NoError(t, err)

	fin, err := jobs.Guard.Finalize(ctx, tx, jobguard.Execution{JobID: id, Generation: 1}, jobguard.FinalizeSpec{
		Complete: func(context.Context, pgx.Tx) error { hook.Store(true); return nil },
		Updates:  []jobguard.Update{writeMeta(jobs, id, "video")},
	})
	require.NoError(t, tx.Rollback(ctx))

	require.False(t, fin.Confirmed(), "confirmed, and then the caller rolled back")
	require.False(t, fin.Completed(), "nothing committed")
	require.Empty(t, metaKinds(t, jobs, id), "no metadata update may run before the completion commits")
	require.False(t, hook.Load(), "Complete must not run for a completion that cannot be confirmed")
	require.Equal(t, "PROCESSING", jobs.Read(t, id).Status)
	require.ErrorIs(t, err, jobguard.ErrInTransaction)
	require.ErrorContains(t, err, "pgx.Tx")
	require.False(t, jobguard.IsPermanent(err), "the job is untouched; only the call was wrong")
}

func TestFinalize_CallerHoldingTheJobRowIsNotWaitedOn(t *testing.T) {
	t.Parallel()
	jobs := setupFinalize(t)
	ctx := context.Background()
	id := jobs.Insert(t, fixture.Job{Generation: 1})
	tx, err := jobs.Env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	// The caller has written the job's row in its transaction and holds it.
	_, err = tx.Exec(ctx, `UPDATE jobs SET progress = 50 WHERE id = $1`, id)
	require.NoError(t, err)

	// No deadline, as a worker would call it: only Finalize's own behaviour
	// may bound the call. The test cancels it only to end a hang.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		fin jobguard.Finalized
		err error
	}
	done := make(chan result, 1)
	go func() {
		fin, err := jobs.Guard.Finalize(fctx, tx, jobguard.Execution{JobID: id, Generation: 1}, jobguard.FinalizeSpec{
			Updates: []jobguard.Update{{Name: "progress", Run: func(ctx context.Context) error {
				_, err := jobs.Env.Pool.Exec(ctx, `UPDATE jobs SET progress = 100 WHERE id = $1`, id)
				return err
			}}},
		})
		done <- result{fin, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(5 * time.Second):
		cancel()
		r = <-done
		t.Fatalf("Finalize waited on the row its caller holds until its context ended: %v", r.err)
	}
	require.ErrorIs(t, r.err, jobguard.ErrInTransaction, "refused before any update could wait")
	require.False(t, r.fin.Confirmed())
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, "PROCESSING", jobs.Read(t, id).Status)
}

func TestFinalize_ConnectionInsideATransactionIsRefused(t *testing.T) {
	t.Parallel()
	jobs := setupFinalize(t)
	ctx := context.Background()
	for name, db := range map[string]func(c *pgxpool.Conn) jobguard.DB{
		"*pgx.Conn":     func(c *pgxpool.Conn) jobguard.DB { return c.Conn() },
		"*pgxpool.Conn": func(c *pgxpool.Conn) jobguard.DB { return c },
	} {
		t.Run(name, func(t *testing.T) {
			id := jobs.Insert(t, fixture.Job{Generation: 1})
			c := openConnTx(t, jobs.Env.Pool)
			// The caller's own write, which only the caller may commit.
			_, err := c.Exec(ctx, `INSERT INTO metadata VALUES ($1, 'caller')`, id)
			require.NoError(t, err)

			fin, err := jobs.Guard.Finalize(ctx, db(c), jobguard.Execution{JobID: id, Generation: 1}, jobguard.FinalizeSpec{
				Updates: []jobguard.Update{writeMeta(jobs, id, "video")},
			})
			require.Empty(t, metaKinds(t, jobs, id), "Finalize committed the caller's transaction, or ran an update")
			require.Equal(t, "PROCESSING", jobs.Read(t, id).Status)
			require.False(t, fin.Completed())
			require.False(t, fin.Confirmed())
			require.ErrorIs(t, err, jobguard.ErrInTransaction)
			require.ErrorContains(t, err, "a connection with a transaction open")
		})
	}
}

func TestFinalize_ConnectionOutsideATransactionIsConfirmed(t *testing.T) {
	t.Parallel()
	jobs := setupFinalize(t)
	ctx := context.Background()
	id := jobs.Insert(t, fixture.Job{Generation: 1})
	c, err := jobs.Env.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()

	fin, err := jobs.Guard.Finalize(ctx, c.Conn(), jobguard.Execution{JobID: id, Generation: 1}, jobguard.FinalizeSpec{
		Updates: []jobguard.Update{writeMeta(jobs, id, "video")},
	})
	require.NoError(t, err)
	require.True(t, fin.Confirmed())
	require.Equal(t, "COMPLETED", jobs.Read(t, id).Status)
	require.Equal(t, []string{"video"}, metaKinds(t, jobs, id))
}
