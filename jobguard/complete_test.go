package jobguard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

func TestCompleteIfActive_CompletesActiveJob(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		id := jobs.Insert(t, fixture.Job{Generation: 3})
		exec := jobguard.Execution{JobID: id, Generation: 3}
		require.NoError(t, jobs.Guard.CompleteIfActive(ctx, jobs.Env.Pool, exec))
		require.Equal(t, jobs.Table.Statuses.Completed, jobs.Read(t, id).Status)
	})
}

func TestCompleteIfActive_ReclaimedJobWritesNothing(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		st := jobs.Table.Statuses
		id := jobs.Insert(t, fixture.Job{Status: st.Failed, Reason: jobguard.ReclaimedReasonDefault, Generation: 1})
		before := jobs.Read(t, id)

		err := jobs.Guard.CompleteIfActive(ctx, jobs.Env.Pool, jobguard.Execution{JobID: id, Generation: 1})
		require.ErrorIs(t, err, jobguard.ErrJobTerminal)
		require.True(t, jobguard.IsPermanent(err))
		var se *jobguard.StateError
		require.ErrorAs(t, err, &se)
		require.Equal(t, jobguard.ReasonStatus, se.Reason)
		require.Equal(t, st.Failed, se.Status)
		require.Equal(t, before, jobs.Read(t, id), "a refused completion must not touch the row")
	})
}

func TestCompleteTx_RefusedCompletionRunsNoneOfFn(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	env.Exec(`CREATE TABLE chapters (job_id uuid, title text)`)
	ctx := context.Background()
	id := jobs.Insert(t, fixture.Job{Status: "FAILED", Generation: 1})

	ran := false
	err := jobs.Guard.CompleteTx(ctx, env.Pool, jobguard.Execution{JobID: id, Generation: 1}, func(tx pgx.Tx) error {
		ran = true
		_, err := tx.Exec(ctx, `INSERT INTO chapters VALUES ($1, 'week 1')`, id)
		return err
	})
	require.ErrorIs(t, err, jobguard.ErrJobTerminal)
	require.False(t, ran, "fn must not run after a refused completion")
	var n int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM chapters`).Scan(&n))
	require.Zero(t, n)
}

func TestCompleteTx_FnErrorRollsBackCompletion(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	env.Exec(`CREATE TABLE chapters (job_id uuid, title text)`)
	ctx := context.Background()
	id := jobs.Insert(t, fixture.Job{Generation: 1})
	boom := errors.New("boom")

	err := jobs.Guard.CompleteTx(ctx, env.Pool, jobguard.Execution{JobID: id, Generation: 1}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO chapters VALUES ($1, 'week 1')`, id); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, "PROCESSING", jobs.Read(t, id).Status)
	var n int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM chapters`).Scan(&n))
	require.Zero(t, n)
}

func TestCompleteTx_WritesCompletionAndRows(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	env.Exec(`CREATE TABLE chapters (job_id uuid, title text)`)
	ctx := context.Background()
	id := jobs.Insert(t, fixture.Job{Generation: 1})

	err := jobs.Guard.CompleteTx(ctx, env.Pool, jobguard.Execution{JobID: id, Generation: 1}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO chapters VALUES ($1, 'week 1')`, id)
		return err
	})
	require.NoError(t, err)
	require.Equal(t, "COMPLETED", jobs.Read(t, id).Status)
	var n int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM chapters WHERE job_id = $1`, id).Scan(&n))
	require.Equal(t, 1, n)
}

func TestCompleteIfProcessing_RefusesQueuedJob(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		st := jobs.Table.Statuses
		queued := jobs.Insert(t, fixture.Job{Status: st.Queued})
		err := jobs.Guard.CompleteIfProcessing(ctx, jobs.Env.Pool, jobguard.Execution{JobID: queued})
		require.ErrorIs(t, err, jobguard.ErrJobTerminal)
		require.Equal(t, st.Queued, jobs.Read(t, queued).Status)

		running := jobs.Insert(t, fixture.Job{Status: st.Processing})
		require.NoError(t, jobs.Guard.CompleteIfProcessing(ctx, jobs.Env.Pool, jobguard.Execution{JobID: running}))
		require.Equal(t, st.Completed, jobs.Read(t, running).Status)
	})
}

func TestCompleteIfActive_UnknownJobIsNotFound(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		missing := jobs.Insert(t, fixture.Job{})
		jobs.Env.Exec("DELETE FROM " + jobs.Table.QualifiedName())
		err := jobs.Guard.CompleteIfActive(context.Background(), jobs.Env.Pool, jobguard.Execution{JobID: missing})
		var se *jobguard.StateError
		require.ErrorAs(t, err, &se)
		require.Equal(t, jobguard.ReasonNotFound, se.Reason)
	})
}

func TestCompleteTx_InsideCallerTransactionCommitsOnlyWithIt(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	env.Exec(`CREATE TABLE chapters (job_id uuid, title text)`)
	ctx := context.Background()
	chapters := func(id string) (n int) {
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM chapters WHERE job_id = $1`, id).Scan(&n))
		return n
	}
	for _, commit := range []bool{false, true} {
		id := jobs.Insert(t, fixture.Job{Generation: 1})
		tx, err := env.Pool.Begin(ctx)
		require.NoError(t, err)
		err = jobs.Guard.CompleteTx(ctx, tx, jobguard.Execution{JobID: id, Generation: 1}, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO chapters VALUES ($1, 'week 1')`, id)
			return err
		})
		require.NoError(t, err)
		require.Equal(t, "PROCESSING", jobs.Read(t, id).Status, "written in the caller's transaction, not committed")
		if !commit {
			require.NoError(t, tx.Rollback(ctx))
			require.Equal(t, "PROCESSING", jobs.Read(t, id).Status, "the caller rolled back: no completion")
			require.Zero(t, chapters(id))
			continue
		}
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, "COMPLETED", jobs.Read(t, id).Status)
		require.Equal(t, 1, chapters(id))
	}
}

func TestCompleteTx_ConnectionInsideATransactionIsRefused(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	env.Exec(`CREATE TABLE chapters (job_id uuid, title text)`)
	ctx := context.Background()
	id := jobs.Insert(t, fixture.Job{Generation: 1})
	c := openConnTx(t, env.Pool)
	_, err := c.Exec(ctx, `INSERT INTO chapters VALUES ($1, 'the caller''s own row')`, id)
	require.NoError(t, err)

	ran := false
	err = jobs.Guard.CompleteTx(ctx, c.Conn(), jobguard.Execution{JobID: id, Generation: 1}, func(pgx.Tx) error {
		ran = true
		return nil
	})
	var n int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM chapters`).Scan(&n))
	require.Zero(t, n, "CompleteTx committed the caller's transaction")
	require.Equal(t, "PROCESSING", jobs.Read(t, id).Status)
	require.False(t, ran)
	require.ErrorIs(t, err, jobguard.ErrInTransaction)
}

// Inside your own transaction, CompleteTx is a savepoint of it: the
// completion commits with your writes or not at all. Finalize, whose result
// says what committed, refuses the transaction instead.
func ExampleGuard_CompleteTx_yourTransaction() {
	tb, done := testenv.ExampleTB()
	defer done()
	env := testenv.New(tb)
	jobs := fixture.Create(tb, env, fixture.Default)
	env.Exec(`CREATE TABLE chapters (job_id uuid, title text)`)
	ctx, pool, guard := context.Background(), env.Pool, jobs.Guard
	exec := jobguard.Execution{JobID: jobs.Insert(tb, fixture.Job{Generation: 1}), Generation: 1}

	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// Your own write, before the completion.
		if _, err := tx.Exec(ctx, `INSERT INTO chapters VALUES ($1, 'outline')`, exec.JobID); err != nil {
			return err
		}
		err := guard.CompleteTx(ctx, tx, exec, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO chapters VALUES ($1, 'week 1')`, exec.JobID)
			return err
		})
		if err != nil {
			return err // rolls back your write too
		}
		fmt.Println("written, not yet committed:", jobs.Read(tb, exec.JobID).Status)

		_, err = guard.Finalize(ctx, tx, exec, jobguard.FinalizeSpec{})
		fmt.Println("Finalize in a transaction:", errors.Is(err, jobguard.ErrInTransaction))
		return nil
	})
	fmt.Println("committed:", jobs.Read(tb, exec.JobID).Status, err)
	// Output:
	// written, not yet committed: PROCESSING
	// Finalize in a transaction: true
	// committed: COMPLETED <nil>
}

// CompleteTx sends BEGIN with the completion. On every handle outside a
// transaction, every spelling of a job's id, a refused completion, a
// superseded generation and an fn that fails leave nothing written and no
// transaction open: the connection is free and a pool's is back.
func TestCompleteTx_EveryHandleIsLeftFreeWhateverTheOutcome(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		pool := jobs.Env.Pool
		st := jobs.Table.Statuses
		handles := map[string]func() (jobguard.DB, func()){
			"pool": func() (jobguard.DB, func()) { return pool, func() {} },
			"pool-conn": func() (jobguard.DB, func()) {
				c, err := pool.Acquire(ctx)
				require.NoError(t, err)
				return c, c.Release
			},
			"conn": func() (jobguard.DB, func()) {
				c, err := pool.Acquire(ctx)
				require.NoError(t, err)
				return c.Conn(), c.Release
			},
		}
		fails := errors.New("fn fails")
		for name, handle := range handles {
			reclaimed := jobs.Insert(t, fixture.Job{Status: st.Failed, Reason: jobguard.ReclaimedReasonDefault, Generation: 1})
			active := jobs.Insert(t, fixture.Job{Generation: 2})
			for _, sp := range jobs.Spellings(reclaimed) {
				db, done := handle()
				ran := false
				err := jobs.Guard.CompleteTx(ctx, db, jobguard.Execution{JobID: sp.ID, Generation: 1}, func(pgx.Tx) error { ran = true; return nil })
				require.ErrorIs(t, err, jobguard.ErrJobTerminal, "%s, %s", name, sp.Name)
				require.False(t, ran, "%s, %s: fn ran after a refused completion", name, sp.Name)
				requireFree(t, db, name)
				done()
			}
			type attempt struct {
				gen int64
				fn  func(pgx.Tx) error
				err error
			}
			attempts := []attempt{{gen: 2, fn: func(pgx.Tx) error { return fails }, err: fails}}
			if jobs.Guard.Fenced() {
				attempts = append(attempts, attempt{gen: 1, fn: func(pgx.Tx) error { return nil }, err: jobguard.ErrJobTerminal}) // superseded
			}
			for _, tc := range attempts {
				db, done := handle()
				err := jobs.Guard.CompleteTx(ctx, db, jobguard.Execution{JobID: active, Generation: tc.gen}, tc.fn)
				require.ErrorIs(t, err, tc.err, name)
				requireFree(t, db, name)
				done()
			}
			require.Equal(t, st.Processing, jobs.Read(t, active).Status, "%s: nothing was written", name)
			require.Equal(t, st.Failed, jobs.Read(t, reclaimed).Status, name)
			require.Equal(t, int32(0), pool.Stat().AcquiredConns(), "%s: the pool's connection is back", name)
		}
	})
}

// requireFree fails t unless db's connection, where it has one of its own,
// is outside any transaction.
func requireFree(t *testing.T, db jobguard.DB, name string) {
	t.Helper()
	var c *pgx.Conn
	switch h := db.(type) {
	case *pgx.Conn:
		c = h
	case interface{ Conn() *pgx.Conn }:
		c = h.Conn()
	}
	if c != nil {
		require.Equal(t, byte('I'), c.PgConn().TxStatus(), "%s: a transaction was left open", name)
	}
}
