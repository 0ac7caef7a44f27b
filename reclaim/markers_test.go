package reclaim_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/reclaim"
)

// noRedis is a Redis client of a port nothing listens on: a test that
// passes it where the code must not need Redis fails if anything uses it.
func noRedis(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// pgReclaimer is a reclaimer whose markers are in Postgres, with no Redis
// configured at all.
func pgReclaimer(t testing.TB, guard *jobguard.Guard, jobs *fixture.Jobs, cfg reclaim.Config) (*reclaim.Reclaimer, *testenv.Logs) {
	t.Helper()
	logs := &testenv.Logs{}
	cfg.Guard, cfg.DB, cfg.Logger = guard, jobs.Env.Pool, logs.Logger()
	if cfg.Limits == nil {
		cfg.Limits = reclaim.StaticLimits{"chapter": 30 * time.Minute}
	}
	r, err := reclaim.New(cfg)
	require.NoError(t, err)
	return r, logs
}

func TestSweep_PostgresMarkersNeedNoRedis(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		db := jobs.Env.Pool
		guard := jobs.NoRedis(t)
		id := jobs.Insert(t, fixture.Job{Generation: 3, UpdatedAgo: time.Hour})
		r, logs := pgReclaimer(t, guard, jobs, reclaim.Config{
			Source: listSource{{ID: id, Type: "chapter", StartedAt: time.Now().Add(-time.Hour)}},
		})
		rep, err := r.Sweep(ctx)
		require.NoError(t, err, "logs:\n%s", logs)
		require.Equal(t, 1, rep.Reclaimed)
		require.Zero(t, rep.MarkerErrors)

		sg, err := jobguard.NewStartGuard(guard, noRedis(t), jobguard.StartGuardConfig{OnLookupError: jobguard.FailClosed})
		require.NoError(t, err)
		m, found, err := sg.Marker(ctx, db, id)
		require.NoError(t, err)
		require.True(t, found, "the marker is written")
		if guard.Fenced() {
			require.EqualValues(t, 3, m.Generation)
		}
		// A late writer puts the job back: the marker alone refuses it.
		jobs.Env.Exec(sqlf(`UPDATE %s SET %s = $1, %s = NULL`, jobs.Table.QualifiedName(),
			quote(jobs.Table.StatusColumn), quote(jobs.Table.FailureReasonColumn)), jobs.Table.Statuses.Queued)
		_, err = sg.Start(ctx, db, id)
		var re *jobguard.ReclaimedError
		require.ErrorAs(t, err, &re)
		require.Equal(t, "marker", re.Source)

		jobs.Env.Exec(sqlf(`UPDATE %s SET %s = $1, %s = $2`, jobs.Table.QualifiedName(),
			quote(jobs.Table.StatusColumn), quote(jobs.Table.FailureReasonColumn)), jobs.Table.Statuses.Failed, jobguard.ReclaimedReasonDefault)
		_, err = guard.Retry(ctx, db, id)
		require.NoError(t, err)
		if !guard.Fenced() {
			// Status-only mode cannot tell an old marker from a fresh one.
			require.NoError(t, sg.PostgresMarkers().Delete(ctx, db, id))
		}
		_, err = sg.Start(ctx, db, id)
		require.NoError(t, err)
	})
}

// A marker commits with its reclaim: when the marker cannot be written,
// the job is not reclaimed either, and the sweep says why.
func TestSweep_PostgresMarkerAndReclaimCommitTogether(t *testing.T) {
	t.Parallel()
	for name, rules := range map[string]map[string]reclaim.ParentRule{
		"without parent rules": nil,
		"with a parent rule":   {"chapter": func(context.Context, pgx.Tx, []jobset.Job) error { return nil }},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			jobs := fixture.Create(t, testenv.New(t), fixture.Default)
			guard := jobs.NoRedis(t)
			id := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: time.Hour})
			r, _ := pgReclaimer(t, guard, jobs, reclaim.Config{OnReclaim: rules,
				Source: listSource{{ID: id, Type: "chapter", StartedAt: time.Now().Add(-time.Hour)}}})
			jobs.Env.Exec(`ALTER TABLE job_reclaim_markers ADD CONSTRAINT refuse CHECK (generation < 0) NOT VALID`)
			_, err := r.Sweep(ctx)
			require.ErrorContains(t, err, "refuse")
			require.ErrorContains(t, err, "write the markers", "the error says the write was the markers' too")
			require.Equal(t, "PROCESSING", jobs.Read(t, id).Status, "no reclaim without its marker")

			jobs.Env.Exec(`ALTER TABLE job_reclaim_markers DROP CONSTRAINT refuse`)
			rep, err := r.Sweep(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, rep.Reclaimed)
			var n int
			require.NoError(t, jobs.Env.Pool.QueryRow(ctx, `SELECT count(*) FROM job_reclaim_markers`).Scan(&n))
			require.Equal(t, 1, n)
		})
	}
}

// Invariant 4: a job whose parent rule fails is not reclaimed and gets no
// marker; the others of the batch get theirs. The page's fail writes the
// markers in Postgres inside its savepoint, so the sweep costs the round
// trips it costs with the markers in Redis (written after the commit,
// outside Postgres): the page, then the page without the refused type,
// then the refused job alone.
func TestSweep_PostgresMarkerOnlyForWhatCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	trips := map[bool]int64{}
	for _, postgres := range []bool{true, false} {
		env := testenv.New(t)
		jobs := fixture.Create(t, env, fixture.Default)
		pool, counted := tracedPool(t, env, false)
		ok := jobs.Insert(t, fixture.Job{Type: "chapter", Generation: 1, UpdatedAgo: time.Hour})
		refused := jobs.Insert(t, fixture.Job{Type: "export", Generation: 1, UpdatedAgo: time.Hour})
		old := time.Now().Add(-time.Hour)
		cfg := reclaim.Config{DB: pool,
			Limits: reclaim.StaticLimits{"chapter": 30 * time.Minute, "export": 30 * time.Minute},
			Source: listSource{{ID: ok, Type: "chapter", StartedAt: old}, {ID: refused, Type: "export", StartedAt: old}},
			OnReclaim: map[string]reclaim.ParentRule{
				"chapter": func(context.Context, pgx.Tx, []jobset.Job) error { return nil },
				"export":  func(context.Context, pgx.Tx, []jobset.Job) error { return errors.New("parent refuses") },
			},
		}
		guard := jobs.Guard
		var r *reclaim.Reclaimer
		if postgres {
			guard = jobs.NoRedis(t)
			cfg.Guard = guard
			var err error
			r, err = reclaim.New(cfg) // no Redis configured at all
			require.NoError(t, err)
		} else {
			r, _ = newReclaimer(t, jobs, cfg)
		}
		before := counted.Load()
		rep, err := r.Sweep(ctx)
		require.NoError(t, err)
		trips[postgres] = counted.Load() - before
		require.Equal(t, []string{ok}, rep.ReclaimedIDs)
		require.Equal(t, 1, rep.RuleErrors)
		if !postgres {
			continue
		}
		s, err := marker.NewPostgresStore(guard, marker.Config{})
		require.NoError(t, err)
		m, found, err := s.Read(ctx, env.Pool, ok)
		require.NoError(t, err)
		require.True(t, found)
		require.EqualValues(t, 1, m.Generation)
		_, found, err = s.Read(ctx, env.Pool, refused)
		require.NoError(t, err)
		require.False(t, found, "no marker for a reclaim that did not commit")
	}
	require.Equal(t, trips[false], trips[true], "round trips with markers in Redis, then in Postgres")
}

func TestNew_RedisMarkersNeedRedis(t *testing.T) {
	t.Parallel()
	jobs := fixture.Create(t, testenv.New(t), fixture.Default)
	_, err := reclaim.New(reclaim.Config{Guard: jobs.GuardWith(t, jobguard.Shared{Markers: jobguard.MarkersRedis}), DB: jobs.Env.Pool})
	require.ErrorContains(t, err, "Redis is nil, and Guard's Shared.Markers is MarkersRedis")
	_, err = reclaim.New(reclaim.Config{Guard: jobs.NoRedis(t), DB: jobs.Env.Pool})
	require.NoError(t, err)
}

func sqlf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
func quote(name string) string               { return ident.Quote(name) }

// Sweepers in separate pools race over the same stalled jobs with their
// markers in Postgres, each marker written by its reclaim's statement,
// while a late writer puts markers of a newer generation on half of the
// jobs: every job is reclaimed once and marked, no marker is lowered,
// and no statement deadlocks with another (which the server would end
// with an error).
func TestSweep_ConcurrentReclaimersWithMarkersInPostgresMarkEachJobOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	guard := jobs.NoRedis(t)
	const n = 200
	var ids []string
	for range n {
		ids = append(ids, jobs.Insert(t, fixture.Job{Generation: 3, UpdatedAgo: 2 * time.Hour}))
	}
	store, err := marker.NewPostgresStore(guard, marker.Config{})
	require.NoError(t, err)

	const sweepers = 4
	reps := make([]reclaim.Report, sweepers)
	errs := make([]error, sweepers+1)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range sweepers {
		pool := env.Connect(testenv.Config{}) // a separate pool each, like separate instances
		r, err := reclaim.New(reclaim.Config{Guard: guard, DB: pool, Brake: noBrake,
			Limits: reclaim.StaticLimits{"chapter": 30 * time.Minute}})
		require.NoError(t, err)
		wg.Go(func() {
			<-start
			reps[i], errs[i] = r.Sweep(ctx)
		})
	}
	late := make([]marker.Marker, 0, n/2)
	for i := 0; i < n; i += 2 {
		// In descending order, against the reclaims' ascending one.
		late = append(late, marker.Marker{JobID: ids[n-2-i], Generation: 9, Reason: "a later reclaim"})
	}
	wg.Go(func() {
		<-start
		for _, m := range late {
			if err := store.Write(ctx, env.Pool, m); err != nil {
				errs[sweepers] = err
				return
			}
		}
	})
	close(start)
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}

	var reclaimed []string
	for _, rep := range reps {
		reclaimed = append(reclaimed, rep.ReclaimedIDs...)
	}
	slices.Sort(reclaimed)
	want := slices.Clone(ids)
	slices.Sort(want)
	require.Equal(t, want, reclaimed, "every job reclaimed exactly once")
	newer := make(map[string]bool, len(late))
	for _, m := range late {
		newer[m.JobID] = true
	}
	for _, id := range ids {
		m, found, err := store.Read(ctx, env.Pool, id)
		require.NoError(t, err)
		require.True(t, found, "job %s is marked", id)
		if newer[id] {
			require.EqualValues(t, 9, m.Generation, "job %s: a marker is never lowered", id)
		} else {
			require.EqualValues(t, 3, m.Generation, "job %s: the generation that lost the job", id)
		}
	}
}
