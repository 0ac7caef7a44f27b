package reclaim_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
)

// setStartedAgo moves a job's started_at to now - ago.
func setStartedAgo(t *testing.T, jobs *fixture.Jobs, id string, ago time.Duration) {
	t.Helper()
	jobs.Backdate(t, id, jobs.Table.StartedAtColumn, ago)
}

func startGuard(t *testing.T, jobs *fixture.Jobs) *jobguard.StartGuard {
	t.Helper()
	sg, err := jobguard.NewStartGuard(jobs.Guard, jobs.Env.Redis,
		jobguard.StartGuardConfig{})
	require.NoError(t, err)
	return sg
}

// An operator retried a job whose first attempt hung in a call that ignores
// its context: the queue still lists that attempt with its old start time.
// The retried job waits in a backlog, QUEUED and not restarted. The old
// listing must not fail it, or the start guard refuses the retry for good.
func TestSweep_RetriedJobWaitingInBacklogIsNotReclaimedOnTheOldAttempt(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		db := jobs.Env.Pool
		id := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
		_, err := jobs.Guard.Retry(ctx, db, fail(t, jobs, id))
		require.NoError(t, err)
		setUpdatedAgo(t, jobs, id, 16*time.Minute) // 16 minutes in the backlog
		r, _ := newReclaimer(t, jobs, reclaim.Config{
			Source: listSource{{ID: id, Type: "chapter", StartedAt: time.Now().Add(-2 * time.Hour)}},
		})

		rep, err := r.Sweep(ctx)
		require.NoError(t, err)
		require.Zero(t, rep.Reclaimed)
		require.Equal(t, 1, rep.Stale, "the listing is of the attempt before the retry")
		require.Equal(t, jobs.Table.Statuses.Queued, jobs.Read(t, id).Status)
		require.False(t, hasMarker(t, jobs, id))
		_, err = startGuard(t, jobs).Start(ctx, db, id)
		require.NoError(t, err, "the operator's retry still runs")
	})
}

// After Retry and Start, the new attempt is 16 minutes into a 30-minute
// limit. The queue's listing of the hung first attempt must not measure it.
func TestSweep_RestartedAttemptIsJudgedOnItsOwnClock(t *testing.T) {
	t.Parallel()
	for _, v := range []fixture.Variant{fixture.Default, fixture.Prisma} {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env := testenv.New(t)
			jobs := fixture.Create(t, env, v)
			id := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
			_, err := jobs.Guard.Retry(ctx, env.Pool, fail(t, jobs, id))
			require.NoError(t, err)
			_, err = startGuard(t, jobs).Start(ctx, env.Pool, id)
			require.NoError(t, err)
			setStartedAgo(t, jobs, id, 16*time.Minute)
			setUpdatedAgo(t, jobs, id, 16*time.Minute)
			r, _ := newReclaimer(t, jobs, reclaim.Config{
				Source: listSource{{ID: id, Type: "chapter", StartedAt: time.Now().Add(-2 * time.Hour)}},
			})

			rep, err := r.Sweep(ctx)
			require.NoError(t, err)
			require.Zero(t, rep.Reclaimed)
			require.Equal(t, 1, rep.Stale, "the listing is older than the row's attempt")
			require.Equal(t, "PROCESSING", jobs.Read(t, id).Status)
		})
	}
}

// A queue lists the row twice: the hung old attempt first, then the current
// one, 16 minutes into its 30-minute limit. The row is judged by the latest.
func TestSweep_RowListedTwiceIsJudgedByItsLatestListing(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		id := jobs.Insert(t, fixture.Job{Generation: 2, UpdatedAgo: 20 * time.Minute})
		now := time.Now()
		r, _ := newReclaimer(t, jobs, reclaim.Config{Source: listSource{
			{ID: id, Type: "chapter", StartedAt: now.Add(-2 * time.Hour)},
			{ID: id, Type: "chapter", StartedAt: now.Add(-16 * time.Minute)},
		}})

		rep, err := r.Sweep(context.Background())
		require.NoError(t, err)
		require.Zero(t, rep.Reclaimed)
		require.Equal(t, reclaim.Report{Scanned: 1, WithinLimit: 1}, rep)
		require.Equal(t, jobs.Table.Statuses.Processing, jobs.Read(t, id).Status)
	})
}

// A worker stores the generation Start gave it in its queue job, so a
// listing names its execution. A listing of an older generation than the
// row's is stale, even on a table with no start column to compare.
func TestSweep_ListingOfAnOlderGenerationIsStale(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		if !jobs.Guard.Fenced() {
			t.Skip("a table without generations cannot tell executions apart")
		}
		old := jobs.Insert(t, fixture.Job{Generation: 5, UpdatedAgo: 2 * time.Hour})
		current := jobs.Insert(t, fixture.Job{Generation: 5, UpdatedAgo: 2 * time.Hour})
		started := time.Now().Add(-2 * time.Hour)
		r, _ := newReclaimer(t, jobs, reclaim.Config{Source: listSource{
			{ID: old, Type: "chapter", StartedAt: started, Generation: 4},
			{ID: current, Type: "chapter", StartedAt: started, Generation: 5},
		}})

		rep, err := r.Sweep(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, rep.Stale)
		require.Equal(t, []string{current}, rep.ReclaimedIDs)
		require.Equal(t, jobs.Table.Statuses.Processing, jobs.Read(t, old).Status)
	})
}

// updated_at is stamped by the database's clock. A reclaimer whose own clock
// runs 12 minutes ahead must still see a job that beat 4 minutes ago as
// progressing.
func TestSweep_ProgressIsJudgedOnTheDatabaseClock(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		id := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
		setUpdatedAgo(t, jobs, id, 4*time.Minute)
		ahead := func() time.Time { return time.Now().Add(12 * time.Minute) }
		r, _ := newReclaimer(t, jobs, reclaim.Config{
			Now:    ahead,
			Source: listSource{{ID: id, Type: "chapter", StartedAt: time.Now().Add(-2 * time.Hour)}},
		})

		rep, err := r.Sweep(context.Background())
		require.NoError(t, err)
		require.Zero(t, rep.Reclaimed)
		require.Equal(t, 1, rep.Progressing)
		require.Equal(t, jobs.Table.Statuses.Processing, jobs.Read(t, id).Status)
	})
}

// A queue that spells one uuid in two letter cases lists one job, not two:
// no phantom lost race.
func TestSweep_UUIDInTwoLetterCasesIsOneJob(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
	old := time.Now().Add(-2 * time.Hour)
	r, _ := newReclaimer(t, jobs, reclaim.Config{Source: listSource{
		{ID: strings.ToUpper(id), Type: "chapter", StartedAt: old},
		{ID: id, Type: "chapter", StartedAt: old},
	}})

	rep, err := r.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Reclaimed)
	require.Zero(t, rep.LostRace, "one job, one decision")
	require.Equal(t, []string{id}, rep.ReclaimedIDs)
}

// fail moves a job to FAILED through the guard, as a reclaim would, and
// returns its id.
func fail(t *testing.T, jobs *fixture.Jobs, id string) string {
	t.Helper()
	row := jobs.Read(t, id)
	require.NoError(t, jobs.Guard.Fail(context.Background(), jobs.Env.Pool,
		jobguard.Execution{JobID: id, Generation: row.Generation}, jobguard.ReclaimedReasonDefault))
	return id
}

// The table source reads only the jobs over their limit, but a type that
// has no limit at all is still reported, once its jobs have run longer than
// the shortest limit: an operator who forgot a type's limit learns of it.
func TestSweep_TableSourceReportsATypeWithoutALimit(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	jobs.Insert(t, fixture.Job{Type: "mystery", Generation: 1, UpdatedAgo: 2 * time.Hour})
	jobs.Insert(t, fixture.Job{Type: "mystery", Generation: 1, UpdatedAgo: 5 * time.Minute}) // not yet
	r, logs := newReclaimer(t, jobs, reclaim.Config{})                                       // chapter: 30 minutes

	rep, err := r.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, reclaim.Report{Scanned: 1, UnknownType: 1}, rep)
	require.Contains(t, logs.String(), `level=WARN msg="reclaim: sweep"`)
	require.Contains(t, logs.String(), "types_without_limit=[mystery]")
}
