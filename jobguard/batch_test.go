package jobguard_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/fixture"
	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

// batchBumpGeneration moves a job to a newer generation without touching
// anything else, the way another start path would fence out an old reader.
func batchBumpGeneration(t *testing.T, jobs *fixture.Jobs, id string) {
	t.Helper()
	tb := jobs.Table
	jobs.Env.Exec(fmt.Sprintf("UPDATE %s SET %s = %s + 1 WHERE %s::text = $1", tb.QualifiedName(),
		ident.Quote(tb.GenerationColumn), ident.Quote(tb.GenerationColumn), ident.Quote(tb.IDColumn)), id)
}

func TestSnapshot_ReadsRowsKeyedByGivenID(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		a := jobs.Insert(t, fixture.Job{Generation: 4, ParentID: "7", UpdatedAgo: time.Hour})
		b := jobs.Insert(t, fixture.Job{Status: jobs.Table.Statuses.Queued})

		got, err := jobs.Guard.Snapshot(ctx, jobs.Env.Pool, []string{a, b, a, "not-a-row", ""})
		require.NoError(t, err)
		require.Len(t, got, 2)
		sa := got[a]
		require.Equal(t, a, sa.ID)
		require.Equal(t, jobs.Table.Statuses.Processing, sa.Status)
		require.Equal(t, jobs.Read(t, a).UpdatedAt, sa.UpdatedAt)
		require.WithinDuration(t, time.Now().Add(-time.Hour), sa.UpdatedAt, time.Minute)
		if jobs.Guard.Fenced() {
			require.EqualValues(t, 4, sa.Generation)
		}
		if jobs.Table.TypeColumn != "" {
			require.Equal(t, "chapter", sa.Type)
		}
		if jobs.Table.ParentIDColumn != "" {
			require.Equal(t, "7", sa.ParentID)
		}
		if jobs.Table.StartedAtColumn != "" {
			require.WithinDuration(t, time.Now().Add(-time.Hour), sa.StartedAt, time.Minute)
		} else {
			require.True(t, sa.StartedAt.IsZero())
		}
		require.Equal(t, jobs.Table.Statuses.Queued, got[b].Status)
	})
}

func TestSnapshot_AcceptsUUIDInAnyCase(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{})
	u := uuid.MustParse(id)
	upper := fmt.Sprintf("%X", u[:]) // no dashes, upper case

	got, err := jobs.Guard.Snapshot(context.Background(), env.Pool, []string{upper})
	require.NoError(t, err)
	require.Equal(t, id, got[upper].ID)
}

func TestActiveJobs_ReturnsProcessingJobsWithStartTime(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		st := jobs.Table.Statuses
		running := jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
		jobs.Insert(t, fixture.Job{Status: st.Queued})
		jobs.Insert(t, fixture.Job{Status: st.Completed})

		got, err := jobs.Guard.ActiveJobs(ctx, jobs.Env.Pool)
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, running, got[0].ID)
		if jobs.Table.StartedAtColumn != "" {
			require.WithinDuration(t, time.Now().Add(-2*time.Hour), got[0].StartedAt, time.Minute)
		}
	})
}

func TestFailIfUnchanged_FailsOnlyRowsStillAsRead(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		db := jobs.Env.Pool
		st := jobs.Table.Statuses
		stalled := jobs.Insert(t, fixture.Job{Generation: 2, UpdatedAgo: time.Hour})
		progressed := jobs.Insert(t, fixture.Job{Generation: 2, UpdatedAgo: time.Hour})
		completed := jobs.Insert(t, fixture.Job{Generation: 2, UpdatedAgo: time.Hour})
		restarted := jobs.Insert(t, fixture.Job{Generation: 2, UpdatedAgo: time.Hour})

		snap, err := jobs.Guard.Snapshot(ctx, db, []string{stalled, progressed, completed, restarted})
		require.NoError(t, err)
		// Between the read and the write: progress, a completion, a new start.
		require.NoError(t, jobs.Guard.Touch(ctx, db, jobguard.Execution{JobID: progressed, Generation: 2}))
		require.NoError(t, jobs.Guard.CompleteIfActive(ctx, db, jobguard.Execution{JobID: completed, Generation: 2}))
		if jobs.Guard.Fenced() {
			batchBumpGeneration(t, jobs, restarted)
		}

		expected := []jobguard.JobState{snap[stalled], snap[progressed], snap[completed], snap[restarted]}
		changed, err := jobs.Guard.FailIfUnchanged(ctx, db, expected, "stuck")
		require.NoError(t, err)

		ids := []string{}
		for _, c := range changed {
			ids = append(ids, c.ID)
			require.Equal(t, st.Failed, c.Status)
		}
		want := []string{stalled}
		if !jobs.Guard.Fenced() {
			want = append(want, restarted) // status-only mode cannot see a restart
		}
		require.ElementsMatch(t, want, ids)

		require.Equal(t, st.Failed, jobs.Read(t, stalled).Status)
		require.Equal(t, "stuck", jobs.Read(t, stalled).Reason)
		require.Equal(t, st.Processing, jobs.Read(t, progressed).Status)
		require.Equal(t, st.Completed, jobs.Read(t, completed).Status)
		if jobs.Guard.Fenced() {
			require.Equal(t, st.Processing, jobs.Read(t, restarted).Status)
		}
	})
}

func TestFailIfUnchanged_SecondWriteChangesNothing(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		id := jobs.Insert(t, fixture.Job{UpdatedAgo: time.Hour})
		snap, err := jobs.Guard.Snapshot(ctx, jobs.Env.Pool, []string{id})
		require.NoError(t, err)

		first, err := jobs.Guard.FailIfUnchanged(ctx, jobs.Env.Pool, []jobguard.JobState{snap[id]}, "stuck")
		require.NoError(t, err)
		require.Len(t, first, 1)
		require.True(t, first[0].UpdatedAt.After(snap[id].UpdatedAt), "the write moves updated_at")
		second, err := jobs.Guard.FailIfUnchanged(ctx, jobs.Env.Pool, []jobguard.JobState{snap[id]}, "stuck")
		require.NoError(t, err)
		require.Empty(t, second)
	})
}

func TestFailIfUnchanged_InvalidIDSendsNothing(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{UpdatedAgo: time.Hour})
	snap, err := jobs.Guard.Snapshot(context.Background(), env.Pool, []string{id})
	require.NoError(t, err)

	_, err = jobs.Guard.FailIfUnchanged(context.Background(), env.Pool,
		[]jobguard.JobState{snap[id], {ID: "nope"}}, "stuck")
	require.ErrorIs(t, err, jobguard.ErrInvalidJobID)
	require.Equal(t, "PROCESSING", jobs.Read(t, id).Status)
}

// A reclaim by hand: read the rows, decide, and fail in one statement only
// those still exactly as read.
func ExampleGuard_FailIfUnchanged() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	guard, err := jobguard.New(ctx, pool, jobguard.DefaultTable())
	if err != nil {
		log.Fatal(err)
	}
	rows, err := guard.Snapshot(ctx, pool, []string{"7c9e6679-7425-40de-944b-e07fc1f90ae7"})
	if err != nil {
		log.Fatal(err)
	}
	var stalled []jobguard.JobState
	for _, r := range rows {
		if time.Since(r.UpdatedAt) > time.Hour {
			stalled = append(stalled, r)
		}
	}
	changed, err := guard.FailIfUnchanged(ctx, pool, stalled, jobguard.ReclaimedReasonDefault)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("failed %d of %d; the others moved meanwhile", len(changed), len(stalled))
}
