package jobguard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

// An operator's cancel inside a transaction of the operator's own and a
// worker's save race on one job, on two connections: whichever writes the
// row first wins, and the other is told. The job is never both COMPLETED
// and reported cancelled, and a cancel that won leaves no saved row.

// blocked waits until the backend pid waits for a lock: the statement it
// runs has met a row another transaction holds.
func blocked(t *testing.T, pool *pgxpool.Pool, pid uint32) {
	t.Helper()
	for deadline := time.Now().Add(testenv.Patience); ; time.Sleep(10 * time.Millisecond) {
		var waiting bool
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting))
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d never waited for the row lock", pid)
		}
	}
}

// raceSetup is a running job, a table for what its save writes, and a
// connection of its own for the worker, whose pid the test watches.
func raceSetup(t *testing.T, jobs *fixture.Jobs) (jobguard.Execution, *pgxpool.Conn) {
	t.Helper()
	ctx := context.Background()
	jobs.Env.Exec(`CREATE TABLE IF NOT EXISTS saved (job_id text NOT NULL)`)
	sg, err := jobguard.NewStartGuard(jobs.Guard, jobs.Env.Redis, jobguard.StartGuardConfig{})
	require.NoError(t, err)
	exec, err := sg.Start(ctx, jobs.Env.Pool, jobs.Insert(t, fixture.Job{Status: jobs.Table.Statuses.Queued}))
	require.NoError(t, err)
	worker, err := jobs.Env.Pool.Acquire(ctx)
	require.NoError(t, err)
	t.Cleanup(worker.Release)
	return exec, worker
}

func savedRows(t *testing.T, jobs *fixture.Jobs, id string) int {
	t.Helper()
	var n int
	require.NoError(t, jobs.Env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM saved WHERE job_id = $1`, id).Scan(&n))
	return n
}

// The cancel's transaction has written the row and not committed when the
// worker's save begins: the save's first statement waits for it, finds
// the job FAILED once it commits, and is refused before the save's own
// writes run.
func TestCancel_InATransactionCommittedAfterTheSaveBeganRefusesTheSave(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		exec, worker := raceSetup(t, jobs)
		tx, err := jobs.Env.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		lost, err := jobs.Guard.Cancel(ctx, tx, exec.JobID, "wrong prompt")
		require.NoError(t, err)
		require.Equal(t, exec, lost)

		saved := make(chan error, 1)
		go func() {
			saved <- jobs.Guard.CompleteTx(ctx, worker.Conn(), exec, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO saved (job_id) VALUES ($1)`, exec.JobID)
				return err
			})
		}()
		blocked(t, jobs.Env.Pool, worker.Conn().PgConn().PID())
		require.NoError(t, tx.Commit(ctx))

		err = <-saved
		require.ErrorIs(t, err, jobguard.ErrJobTerminal, "the save is refused: the cancel committed first")
		row := jobs.Read(t, exec.JobID)
		require.Equal(t, jobs.Table.Statuses.Failed, row.Status)
		require.True(t, jobs.Guard.Shared().Cancelled(row.Reason))
		require.Zero(t, savedRows(t, jobs, exec.JobID), "the save's writes never ran")
	})
}

// The worker's save has written the row and not committed when the
// operator's cancel runs in a transaction of its own: the cancel waits
// for it, finds the job COMPLETED once it commits, and reports it
// terminal (ErrNotCancellable) — the operator's transaction then commits
// nothing of the cancel. Under REPEATABLE READ, whose snapshot predates
// the save, the cancel fails with the server's serialization error
// instead: not cancelled either.
func TestCancel_InATransactionAfterTheSaveBeganReportsTheJobTerminal(t *testing.T) {
	t.Parallel()
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead} {
		t.Run(string(iso), func(t *testing.T) {
			t.Parallel()
			fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
				ctx := context.Background()
				exec, worker := raceSetup(t, jobs)
				operator, err := jobs.Env.Pool.Acquire(ctx)
				require.NoError(t, err)
				defer operator.Release()

				inSave := make(chan struct{})
				commit := make(chan struct{})
				saved := make(chan error, 1)
				go func() {
					saved <- jobs.Guard.CompleteTx(ctx, worker.Conn(), exec, func(tx pgx.Tx) error {
						close(inSave) // the completion, the save's first statement, holds the row
						<-commit
						_, err := tx.Exec(ctx, `INSERT INTO saved (job_id) VALUES ($1)`, exec.JobID)
						return err
					})
				}()
				<-inSave
				tx, err := operator.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
				require.NoError(t, err)
				defer func() { _ = tx.Rollback(ctx) }()
				_, err = tx.Exec(ctx, `SELECT 1`) // the snapshot, under REPEATABLE READ
				require.NoError(t, err)
				cancelled := make(chan error, 1)
				go func() {
					_, err := jobs.Guard.Cancel(ctx, tx, exec.JobID, "wrong prompt")
					cancelled <- err
				}()
				blocked(t, jobs.Env.Pool, operator.Conn().PgConn().PID())
				close(commit)
				require.NoError(t, <-saved)

				err = <-cancelled
				require.Error(t, err, "a cancel reported after the job completed")
				if iso == pgx.ReadCommitted {
					require.ErrorIs(t, err, jobguard.ErrNotCancellable)
					var se *jobguard.StateError
					require.True(t, errors.As(err, &se))
					require.Equal(t, jobs.Table.Statuses.Completed, se.Status)
				}
				_ = tx.Rollback(ctx)
				row := jobs.Read(t, exec.JobID)
				require.Equal(t, jobs.Table.Statuses.Completed, row.Status)
				require.False(t, jobs.Guard.Shared().Cancelled(row.Reason))
				require.Equal(t, 1, savedRows(t, jobs, exec.JobID))
			})
		})
	}
}
