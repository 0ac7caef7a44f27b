package jobset_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/jobguard/marker"
)

// The markers are written by the reclaim's own statement for exactly the
// jobs it failed, keyed by the canonical id whatever spelling the caller
// gave, at the generation that lost the job, as Write would write them: a
// live marker of a higher generation is kept, an expired one replaced.
// A job that moved, that a new start fenced out (on a table with
// generations), or that another transaction holds gets none.
func TestFailIfUnchangedMarked_MarksExactlyTheJobsItFails(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		db := jobs.Env.Pool
		guard := jobs.NoRedis(t)
		store, err := marker.NewPostgresStore(guard, marker.Config{})
		require.NoError(t, err)
		gen := func(g int64) int64 {
			if guard.Fenced() {
				return g
			}
			return 0
		}
		stalled := jobs.Insert(t, fixture.Job{Generation: 2, UpdatedAgo: time.Hour})
		progressed := jobs.Insert(t, fixture.Job{Generation: 2, UpdatedAgo: time.Hour})
		held := jobs.Insert(t, fixture.Job{Generation: 2, UpdatedAgo: time.Hour})
		newer := jobs.Insert(t, fixture.Job{Generation: 2, UpdatedAgo: time.Hour})
		expired := jobs.Insert(t, fixture.Job{Generation: 2, UpdatedAgo: time.Hour})
		restarted := jobs.Insert(t, fixture.Job{Generation: 2, UpdatedAgo: time.Hour})
		require.NoError(t, store.Write(ctx, db,
			marker.Marker{JobID: newer, Generation: 7, Reason: "an earlier reclaim"},
			marker.Marker{JobID: expired, Generation: 7, Reason: "long ago"}))
		jobs.Env.Exec(`UPDATE job_reclaim_markers SET expires_at = statement_timestamp() - interval '1 second' WHERE job_id = $1`, expired)

		all := []string{stalled, progressed, held, newer, expired, restarted}
		snap, err := jobset.New(guard).Snapshot(ctx, db, all)
		require.NoError(t, err)
		require.NoError(t, guard.Touch(ctx, db, jobguard.Execution{JobID: progressed, Generation: 2}))
		if guard.Fenced() {
			batchBumpGeneration(t, jobs, restarted)
		}
		worker, err := db.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = worker.Rollback(ctx) }()
		_, err = worker.Exec(ctx, fmt.Sprintf("SELECT 1 FROM %s WHERE %s::text = $1 FOR UPDATE",
			jobs.Table.QualifiedName(), ident.Quote(jobs.Table.IDColumn)), held)
		require.NoError(t, err)

		var expected []jobset.Job
		for i, id := range all {
			// Each job named another way (a text id has only one).
			j := snap[id]
			spellings := jobs.Spellings(id)
			j.ID = spellings[(i+1)%len(spellings)].ID
			expected = append(expected, j)
		}
		res, err := jobset.New(guard).FailIfUnchangedMarked(ctx, db, expected, "stuck", store)
		require.NoError(t, err)
		wantFailed, wantMoved := []string{stalled, newer, expired}, 2
		if !guard.Fenced() {
			// Status-only mode cannot see a new start.
			wantFailed, wantMoved = append(wantFailed, restarted), 1
		}
		require.Equal(t, wantMoved, res.Moved)
		require.Equal(t, 1, res.Locked)
		var failed []string
		for _, j := range res.Failed {
			failed = append(failed, j.ID)
		}
		require.ElementsMatch(t, wantFailed, failed)
		require.NoError(t, worker.Rollback(ctx))

		read := func(id string) (marker.Marker, bool) {
			m, found, err := store.Read(ctx, db, id)
			require.NoError(t, err)
			m.At = time.Time{}
			return m, found
		}
		m, found := read(stalled)
		require.True(t, found)
		require.Equal(t, marker.Marker{JobID: stalled, Generation: gen(2), Reason: "stuck"}, m)
		for _, id := range []string{progressed, held} {
			_, found := read(id)
			require.False(t, found, "no marker for a job the write left alone")
		}
		_, found = read(restarted)
		require.Equal(t, !guard.Fenced(), found, "a marker only for a job the write failed")
		m, _ = read(newer)
		require.Equal(t, marker.Marker{JobID: newer, Generation: 7, Reason: "an earlier reclaim"}, m, "a live marker of a higher generation is kept")
		m, _ = read(expired)
		require.Equal(t, marker.Marker{JobID: expired, Generation: gen(2), Reason: "stuck"}, m, "an expired marker is replaced")

		var n int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM job_reclaim_markers`).Scan(&n))
		require.Equal(t, len(wantFailed), n, "one row per job, under its canonical id")
	})
}

// In a caller's transaction the markers are the transaction's: rolled
// back with the failures, or committed with them.
func TestFailIfUnchangedMarked_InACallersTransactionGoesWithIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	jobs := fixture.Create(t, testenv.New(t), fixture.Default)
	db := jobs.Env.Pool
	guard := jobs.NoRedis(t)
	store, err := marker.NewPostgresStore(guard, marker.Config{})
	require.NoError(t, err)
	id := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: time.Hour})
	snap, err := jobset.New(guard).Snapshot(ctx, db, []string{id})
	require.NoError(t, err)

	for _, commit := range []bool{false, true} {
		tx, err := db.Begin(ctx)
		require.NoError(t, err)
		res, err := jobset.New(guard).FailIfUnchangedMarked(ctx, tx, []jobset.Job{snap[id]}, "stuck", store)
		require.NoError(t, err)
		require.Len(t, res.Failed, 1)
		if commit {
			require.NoError(t, tx.Commit(ctx))
		} else {
			require.NoError(t, tx.Rollback(ctx))
		}
		_, found, err := store.Read(ctx, db, id)
		require.NoError(t, err)
		require.Equal(t, commit, found)
		want := jobs.Table.Statuses.Processing
		if commit {
			want = jobs.Table.Statuses.Failed
		}
		require.Equal(t, want, jobs.Read(t, id).Status)
	}
}

// A store that keeps another jobs table's markers, or none, is refused
// before anything is written.
func TestFailIfUnchangedMarked_StoreOfAnotherTableIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	other := fixture.Create(t, env, fixture.Prisma)
	guard := jobs.NoRedis(t)
	store, err := marker.NewPostgresStore(other.NoRedis(t), marker.Config{})
	require.NoError(t, err)
	id := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: time.Hour})
	snap, err := jobset.New(guard).Snapshot(ctx, env.Pool, []string{id})
	require.NoError(t, err)

	_, err = jobset.New(guard).FailIfUnchangedMarked(ctx, env.Pool, []jobset.Job{snap[id]}, "stuck", store)
	require.ErrorContains(t, err, `the marker store keeps the markers of "`+env.Schema+`"."CourseJob", not of "`)
	_, err = jobset.New(guard).FailIfUnchangedMarked(ctx, env.Pool, []jobset.Job{snap[id]}, "stuck", nil)
	require.ErrorContains(t, err, "the marker store is nil")
	require.Equal(t, jobs.Table.Statuses.Processing, jobs.Read(t, id).Status)
	var n int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM job_reclaim_markers`).Scan(&n))
	require.Zero(t, n)
}
