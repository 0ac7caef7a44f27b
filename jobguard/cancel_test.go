package jobguard_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

// Cancel fails a QUEUED or PROCESSING job with the cancel's reason and
// bumps its generation, in every table shape, whatever spelling of its id
// it is given; it returns the execution that lost the job, named by its
// canonical id.
func TestCancel_FailsAnActiveJobAndBumpsItsGeneration(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		st := jobs.Table.Statuses
		for _, sp := range jobs.Spellings(jobs.Insert(t, fixture.Job{})) {
			for _, status := range []string{st.Queued, st.Processing} {
				t.Run(sp.Name+"/"+status, func(t *testing.T) {
					id := jobs.Insert(t, fixture.Job{Status: status, Generation: 4})
					lost, err := jobs.Guard.Cancel(ctx, jobs.Env.Pool, respell(t, jobs, id, sp.Name), "wrong prompt")
					require.NoError(t, err)
					row := jobs.Read(t, id)
					require.Equal(t, st.Failed, row.Status)
					require.Equal(t, jobguard.CancelledReasonDefault+": wrong prompt", row.Reason)
					require.True(t, jobs.Guard.Shared().Cancelled(row.Reason))
					require.False(t, jobs.Guard.Shared().Reclaimed(row.Reason))
					require.Equal(t, id, lost.JobID, "the execution that lost the job is named by its canonical id")
					if jobs.Guard.Fenced() {
						require.EqualValues(t, 5, row.Generation, "the generation is bumped")
						require.EqualValues(t, 4, lost.Generation, "the generation that lost the job")
					}
				})
			}
		}
	})
}

// A job that is COMPLETED or FAILED (cancelled already, too), or that does
// not exist, is refused with a *StateError wrapping ErrNotCancellable that
// says why, and is left as it was.
func TestCancel_RefusesAFinishedJobAndChangesNothing(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		st := jobs.Table.Statuses
		cancelled := jobs.Insert(t, fixture.Job{})
		_, err := jobs.Guard.Cancel(ctx, jobs.Env.Pool, cancelled, "")
		require.NoError(t, err)
		for name, id := range map[string]string{
			"completed": jobs.Insert(t, fixture.Job{Status: st.Completed, Generation: 3}),
			"failed":    jobs.Insert(t, fixture.Job{Status: st.Failed, Generation: 3, Reason: "boom"}),
			"cancelled": cancelled,
		} {
			t.Run(name, func(t *testing.T) {
				before := jobs.Read(t, id)
				_, err := jobs.Guard.Cancel(ctx, jobs.Env.Pool, id, "again")
				require.ErrorIs(t, err, jobguard.ErrNotCancellable)
				var se *jobguard.StateError
				require.ErrorAs(t, err, &se)
				require.Equal(t, jobguard.OpCancel, se.Op)
				require.Equal(t, jobguard.ReasonStatus, se.Reason)
				require.Equal(t, before.Status, se.Status)
				require.Contains(t, err.Error(), "cannot be cancelled: cancel job "+id+": job is "+before.Status)
				require.Equal(t, before, jobs.Read(t, id))
			})
		}
		gone := jobs.Insert(t, fixture.Job{})
		jobs.Env.Exec(sqlf(`DELETE FROM %s WHERE %s::text = '%s'`, jobs.Table.QualifiedName(), quote(jobs.Table.IDColumn), gone))
		_, err = jobs.Guard.Cancel(ctx, jobs.Env.Pool, gone, "x")
		require.ErrorIs(t, err, jobguard.ErrNotCancellable)
		var se *jobguard.StateError
		require.ErrorAs(t, err, &se)
		require.Equal(t, jobguard.ReasonNotFound, se.Reason)
	})
}

// The bare cancel stores CancelledReason alone; a reason longer than a
// varchar(n) column is cut to fit, as Fail's is, and the job is cancelled
// all the same.
func TestCancel_StoresItsReasonAsFailDoes(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.IntID) // failure_reason varchar(200)
	ctx := context.Background()

	bare := jobs.Insert(t, fixture.Job{})
	_, err := jobs.Guard.Cancel(ctx, env.Pool, bare, "")
	require.NoError(t, err)
	require.Equal(t, jobguard.CancelledReasonDefault, jobs.Read(t, bare).Reason)

	long := jobs.Insert(t, fixture.Job{})
	reason := "nul \x00 and \xff, then " + strings.Repeat("a long story ", 40)
	_, err = jobs.Guard.Cancel(ctx, env.Pool, long, reason)
	require.NoError(t, err)
	row := jobs.Read(t, long)
	require.Equal(t, jobs.Table.Statuses.Failed, row.Status)
	want := []rune(jobguard.CancelledReasonDefault + ": nul \\x00 and \uFFFD, then " + strings.Repeat("a long story ", 40))
	require.Equal(t, string(want[:200]), row.Reason)
}

// The running execution is fenced out by the cancel: its completion and
// its Fail are refused with ErrJobTerminal, even after another path moved
// the row back to PROCESSING; and the start guard refuses the job, before
// and after that, with ErrCancelled, a permanent error that says
// "cancelled".
func TestCancel_FencesTheRunningExecutionAndTheStartGuardRefusesIt(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		env, g := jobs.Env, jobs.Guard
		st := jobs.Table.Statuses
		for _, sg := range []*jobguard.StartGuard{newStartGuard(t, jobs, jobguard.StartGuardConfig{}), noRedisStartGuard(t, jobs)} {
			id := jobs.Insert(t, fixture.Job{Status: st.Queued})
			exec, err := sg.Start(ctx, env.Pool, id)
			require.NoError(t, err)
			_, err = g.Cancel(ctx, env.Pool, id, "by hand")
			require.NoError(t, err)

			require.ErrorIs(t, g.CompleteIfActive(ctx, env.Pool, exec), jobguard.ErrJobTerminal)
			require.ErrorIs(t, g.Fail(ctx, env.Pool, exec, "late"), jobguard.ErrJobTerminal)
			refused := func(err error) {
				t.Helper()
				require.ErrorIs(t, err, jobguard.ErrCancelled)
				require.True(t, jobguard.IsPermanent(err))
				var ce *jobguard.CancelledError
				require.ErrorAs(t, err, &ce)
				require.Equal(t, id, ce.JobID)
				require.Equal(t, jobguard.CancelledReasonDefault+": by hand", ce.Reason)
				require.Contains(t, err.Error(), "cancelled")
			}
			refused(sg.Check(ctx, env.Pool, id))
			_, err = sg.Start(ctx, env.Pool, id)
			refused(err)

			// Another path puts the job back without Retry: the reason
			// still refuses it, and the old execution stays fenced out.
			env.Exec(sqlf(`UPDATE %s SET %s = '%s' WHERE %s::text = '%s'`, jobs.Table.QualifiedName(),
				quote(jobs.Table.StatusColumn), st.Processing, quote(jobs.Table.IDColumn), id))
			refused(sg.Check(ctx, env.Pool, id))
			_, err = sg.Start(ctx, env.Pool, id)
			refused(err)
			if g.Fenced() {
				require.ErrorIs(t, g.CompleteIfActive(ctx, env.Pool, exec), jobguard.ErrJobTerminal)
			}
			require.Equal(t, st.Processing, jobs.Read(t, id).Status, "the refused start wrote nothing")
		}
	})
}

// noRedisStartGuard is a start guard whose markers are in Postgres.
func noRedisStartGuard(t *testing.T, jobs *fixture.Jobs) *jobguard.StartGuard {
	t.Helper()
	sg, err := jobguard.NewStartGuard(jobs.NoRedis(t), nil, jobguard.StartGuardConfig{})
	require.NoError(t, err)
	return sg
}

// Retry undoes a cancel as it undoes a reclaim: QUEUED, the reason
// cleared, the generation bumped; the start guard then starts the job.
func TestRetry_UndoesACancel(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		env, g := jobs.Env, jobs.Guard
		id := jobs.Insert(t, fixture.Job{Generation: 2})
		_, err := g.Cancel(ctx, env.Pool, id, "oops")
		require.NoError(t, err)
		gen, err := g.Retry(ctx, env.Pool, id)
		require.NoError(t, err)
		row := jobs.Read(t, id)
		require.Equal(t, jobs.Table.Statuses.Queued, row.Status)
		require.Empty(t, row.Reason)
		if g.Fenced() {
			require.EqualValues(t, 4, gen, "the cancel and the retry each bumped it")
		}
		exec, err := newStartGuard(t, jobs, jobguard.StartGuardConfig{}).Start(ctx, env.Pool, id)
		require.NoError(t, err)
		require.NoError(t, g.CompleteIfActive(ctx, env.Pool, exec))
	})
}

// The cancel's notice is sent with its commit, on the guard's notice
// channel, in the watchers' format; a cancel inside a caller's
// transaction that rolls back changes nothing and sends nothing. The
// first notice heard after the rollback is the next committed cancel's.
func TestCancel_InACallersTransactionThatRollsBackChangesNothingAndSendsNothing(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		env, g := jobs.Env, jobs.Guard
		listener, err := env.Pool.Acquire(ctx)
		require.NoError(t, err)
		defer listener.Release()
		_, err = listener.Exec(ctx, "LISTEN "+ident.Quote(g.Shared().NoticeChannel))
		require.NoError(t, err)

		rolledBack := jobs.Insert(t, fixture.Job{Generation: 7})
		before := jobs.Read(t, rolledBack)
		tx, err := env.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = g.Cancel(ctx, tx, rolledBack, "in a transaction")
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))
		require.Equal(t, before, jobs.Read(t, rolledBack))

		committed := jobs.Insert(t, fixture.Job{Generation: 9})
		err = pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
			_, err := g.Cancel(ctx, tx, committed, "for real")
			return err
		})
		require.NoError(t, err)

		wctx, cancel := context.WithTimeout(ctx, testenv.Patience)
		defer cancel()
		n, err := listener.Conn().WaitForNotification(wctx)
		require.NoError(t, err)
		var got []struct {
			JobID      string `json:"job_id"`
			Generation int64  `json:"generation"`
			Table      string `json:"table"`
			Cancelled  bool   `json:"cancelled"`
		}
		require.NoError(t, json.Unmarshal([]byte(n.Payload), &got), n.Payload)
		require.Len(t, got, 1, n.Payload)
		require.Equal(t, committed, got[0].JobID, "the rolled-back cancel sent nothing: %s", n.Payload)
		require.Equal(t, g.TableKey(), got[0].Table)
		require.True(t, got[0].Cancelled)
		if g.Fenced() {
			require.EqualValues(t, 9, got[0].Generation, "the notice names the generation that lost the job")
		}
	})
}
