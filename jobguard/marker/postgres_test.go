package marker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
)

// pgStartGuard is a start guard with its markers in Postgres and no Redis
// at all.
func pgStartGuard(t *testing.T, jobs *fixture.Jobs) *jobguard.StartGuard {
	t.Helper()
	sg, err := jobguard.NewStartGuard(jobs.NoRedis(t), nil, jobguard.StartGuardConfig{})
	require.NoError(t, err)
	require.Nil(t, sg.Markers(), "no Redis store")
	require.NotNil(t, sg.PostgresMarkers())
	return sg
}

func TestPostgresStore_StartRefusesALiveMarkerWithoutRedis(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		sg := pgStartGuard(t, jobs)
		id := jobs.Insert(t, fixture.Job{Status: jobs.Table.Statuses.Queued})
		exec, err := sg.Start(ctx, jobs.Env.Pool, id)
		require.NoError(t, err)
		// The reclaim commits with its marker; then a late writer puts the
		// job back and clears the reason: only the marker remains.
		require.NoError(t, pgx.BeginFunc(ctx, jobs.Env.Pool, func(tx pgx.Tx) error {
			if err := jobs.Guard.Fail(ctx, tx, exec, jobguard.ReclaimedReasonDefault); err != nil {
				return err
			}
			return sg.PostgresMarkers().Write(ctx, tx, marker.Marker{JobID: exec.JobID, Generation: exec.Generation, Reason: jobguard.ReclaimedReasonDefault})
		}))
		jobs.Env.Exec(sqlf(`UPDATE %s SET %s = $1, %s = NULL`, jobs.Table.QualifiedName(),
			quote(jobs.Table.StatusColumn), quote(jobs.Table.FailureReasonColumn)), jobs.Table.Statuses.Queued)

		_, err = sg.Start(ctx, jobs.Env.Pool, id)
		var re *jobguard.ReclaimedError
		require.ErrorAs(t, err, &re)
		require.ErrorIs(t, err, jobguard.ErrReclaimed)
		require.True(t, jobguard.IsPermanent(err))
		require.Equal(t, "marker", re.Source)
		require.Equal(t, jobguard.ReclaimedReasonDefault, re.Reason)
		require.Equal(t, jobs.Table.Statuses.Queued, jobs.Read(t, id).Status, "a refused start writes nothing")
		require.ErrorIs(t, sg.Check(ctx, jobs.Env.Pool, id), jobguard.ErrReclaimed)

		if jobs.Guard.Fenced() {
			// An explicit retry bumps the generation past the marker.
			jobs.Env.Exec(sqlf(`UPDATE %s SET %s = %s + 1`, jobs.Table.QualifiedName(),
				quote(jobs.Table.GenerationColumn), quote(jobs.Table.GenerationColumn)))
			next, err := sg.Start(ctx, jobs.Env.Pool, id)
			require.NoError(t, err, "a marker of an older generation no longer applies")
			require.Greater(t, next.Generation, exec.Generation+1)
		}
	})
}

func TestPostgresStore_ReclaimRolledBackLeavesNoMarker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	jobs := fixture.Create(t, testenv.New(t), fixture.Default)
	sg := pgStartGuard(t, jobs)
	id := jobs.Insert(t, fixture.Job{Status: jobs.Table.Statuses.Queued})
	tx, err := jobs.Env.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, sg.PostgresMarkers().Write(ctx, tx, marker.Marker{JobID: id, Generation: 9, Reason: "r"}))
	require.NoError(t, tx.Rollback(ctx))
	_, found, err := sg.Marker(ctx, jobs.Env.Pool, id)
	require.NoError(t, err)
	require.False(t, found, "a marker commits with its reclaim, or not at all")
	_, err = sg.Start(ctx, jobs.Env.Pool, id)
	require.NoError(t, err)
}

// Invariant 12: a marker's generation only grows, whatever order the
// writers' transactions commit in.
func TestPostgresStore_WriteNeverLowersTheGeneration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.TextID)
	s, err := marker.NewPostgresStore(jobs.NoRedis(t), marker.Config{})
	require.NoError(t, err)

	require.NoError(t, s.Write(ctx, env.Pool, marker.Marker{JobID: "job-1", Generation: 5, Reason: "newer"}))
	require.NoError(t, s.Write(ctx, env.Pool, marker.Marker{JobID: "job-1", Generation: 3, Reason: "older"}))
	m, found, err := s.Read(ctx, env.Pool, "job-1")
	require.NoError(t, err)
	require.True(t, found)
	require.EqualValues(t, 5, m.Generation, "a late writer of an older generation changes nothing")
	require.Equal(t, "newer", m.Reason)

	const writers = 12
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range 20 {
				err := s.Write(ctx, env.Pool, marker.Marker{JobID: fmt.Sprintf("job-%d", i), Generation: int64(writers - g)},
					marker.Marker{JobID: fmt.Sprintf("job-%d", 19-i), Generation: int64(writers - g)})
				if err != nil {
					t.Errorf("write: %v", err)
				}
			}
		})
	}
	wg.Wait()
	for i := range 20 {
		m, found, err := s.Read(ctx, env.Pool, fmt.Sprintf("job-%d", i))
		require.NoError(t, err)
		require.True(t, found)
		require.EqualValues(t, writers, m.Generation, "job-%d", i)
	}

	err = s.Write(ctx, env.Pool, marker.Marker{JobID: "job-1", Generation: -1})
	require.ErrorContains(t, err, "generation -1 is negative")
}

// Invariant 11: every spelling of one job writes and reads one marker, under
// the canonical id, and job 42 of two tables has two.
func TestPostgresStore_OneJobOneMarkerWhateverTheSpelling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	ints := fixture.Create(t, env, fixture.IntID)
	uuids := fixture.Create(t, env, fixture.NoGeneration)
	si, err := marker.NewPostgresStore(ints.NoRedis(t), marker.Config{})
	require.NoError(t, err)
	su, err := marker.NewPostgresStore(uuids.NoRedis(t), marker.Config{})
	require.NoError(t, err)

	require.NoError(t, si.Write(ctx, env.Pool, marker.Marker{JobID: "+0042", Generation: 2, Reason: "r"},
		marker.Marker{JobID: " 42", Generation: 3, Reason: "r"}))
	m, found, err := si.Read(ctx, env.Pool, "42")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "42", m.JobID)
	require.EqualValues(t, 3, m.Generation)

	const upper = "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"
	require.NoError(t, su.Write(ctx, env.Pool, marker.Marker{JobID: upper, Generation: 1, Reason: "r"}))
	m, found, err = su.Read(ctx, env.Pool, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", m.JobID)

	var rows []string
	r, err := env.Pool.Query(ctx, `SELECT jobs_table || ' ' || job_id FROM job_reclaim_markers ORDER BY 1`)
	require.NoError(t, err)
	rows, err = pgx.CollectRows(r, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{
		fmt.Sprintf(`"%s"."legacy_jobs" a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11`, env.Schema),
		fmt.Sprintf(`"%s"."tasks" 42`, env.Schema),
	}, rows)

	// Job 42 of another table has no marker.
	_, found, err = su.Read(ctx, env.Pool, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12")
	require.NoError(t, err)
	require.False(t, found)

	// An id the column cannot hold is refused before anything is sent, so
	// the transaction around the write stays usable.
	require.NoError(t, pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
		err := su.Write(ctx, tx, marker.Marker{JobID: "not-a-uuid", Generation: 1})
		require.ErrorIs(t, err, jobguard.ErrInvalidJobID)
		_, err = tx.Exec(ctx, `SELECT 1`)
		return err
	}))
}

// Invariant 13: a marker is stamped, and expires, on the database's clock;
// the process's clock and a Marker's At play no part.
func TestPostgresStore_ExpiryIsOnTheDatabaseClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	sg := pgStartGuard(t, jobs)
	s := sg.PostgresMarkers()
	id := jobs.Insert(t, fixture.Job{Status: jobs.Table.Statuses.Queued})

	require.NoError(t, s.Write(ctx, env.Pool, marker.Marker{JobID: id, Generation: 7, Reason: "r", At: time.Now().Add(-30 * 24 * time.Hour)}))
	var stamped, expires, dbNow time.Time
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT reclaimed_at, expires_at, now() FROM job_reclaim_markers`).Scan(&stamped, &expires, &dbNow))
	require.WithinDuration(t, dbNow, stamped, time.Minute, "stamped by the database, not from At")
	require.Equal(t, marker.TTLDefault, expires.Sub(stamped))
	m, found, err := s.Read(ctx, env.Pool, id)
	require.NoError(t, err)
	require.True(t, found)
	require.True(t, m.At.Equal(stamped))

	// Past its expiry on the database's clock, the marker says nothing: Start
	// lets the job through, and a lower generation may take the row.
	env.Exec(`UPDATE job_reclaim_markers SET expires_at = statement_timestamp() - interval '1 millisecond'`)
	_, found, err = s.Read(ctx, env.Pool, id)
	require.NoError(t, err)
	require.False(t, found, "an expired marker is not read")
	_, err = sg.Start(ctx, env.Pool, id)
	require.NoError(t, err)
	require.NoError(t, s.Write(ctx, env.Pool, marker.Marker{JobID: id, Generation: 1, Reason: "again"}))
	m, found, err = s.Read(ctx, env.Pool, id)
	require.NoError(t, err)
	require.True(t, found)
	require.EqualValues(t, 1, m.Generation)
}

func TestNewStartGuard_MarkerSettingNamesWhatIsMissing(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)

	_, err := jobguard.NewStartGuard(jobs.GuardWith(t, jobguard.Shared{Markers: jobguard.MarkersRedis}), nil, jobguard.StartGuardConfig{})
	require.ErrorContains(t, err, "Shared.Markers is MarkersRedis, but the Redis client is nil")

	env.Exec(`DROP TABLE job_reclaim_markers`)
	_, err = jobguard.NewStartGuard(jobs.NoRedis(t), nil, jobguard.StartGuardConfig{})
	require.ErrorContains(t, err, "job_reclaim_markers does not exist")
	require.ErrorContains(t, err, "apply marker.Migration")

	_, err = jobguard.NewWithConfig(context.Background(), env.Pool, jobs.Table, jobguard.GuardConfig{Shared: jobguard.Shared{Markers: 7}})
	require.ErrorContains(t, err, "Shared.Markers 7 is neither MarkersPostgres nor MarkersRedis")

	// The default needs no Redis: a plain New and no client at all.
	env.Exec(marker.Migration)
	g, err := jobguard.New(context.Background(), env.Pool, jobs.Table)
	require.NoError(t, err)
	require.Equal(t, jobguard.MarkersPostgres, g.Shared().Markers)
	_, err = jobguard.NewStartGuard(g, nil, jobguard.StartGuardConfig{})
	require.NoError(t, err)
}

func TestMigration_CreatesNoJobsTable(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	env.Exec(marker.Migration)
	env.Exec(marker.Migration) // safe to run again
	var tables []string
	r, err := env.Pool.Query(context.Background(), `SELECT tablename::text FROM pg_tables WHERE schemaname = $1`, env.Schema)
	require.NoError(t, err)
	tables, err = pgx.CollectRows(r, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"job_reclaim_markers"}, tables)
}
