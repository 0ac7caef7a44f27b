package reclaim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/testkit/benchkit"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/reclaim"
)

// tracedPool is a pool on env's database whose round trips are counted
// (each statement, and each batch, is one), in the extended or the simple
// protocol.
func tracedPool(t *testing.T, env *testenv.Env, simple bool) (*pgxpool.Pool, *benchkit.RoundTrips) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(env.DatabaseURL)
	require.NoError(t, err)
	trips := &benchkit.RoundTrips{}
	cfg.ConnConfig.Tracer = trips
	if simple {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, trips
}

// Over the jobs table with the limits in a table on the same handle, a
// sweep reads the limits and modes, the active types and the count of the
// running jobs without a start in one round trip, then the overdue page,
// then writes: three round trips, where each read was one of its own
// before (five), with the markers in Redis (written after the commit) and
// in Postgres (written by the reclaim's own statement). The report is what
// the reads say: the limit and the mode of each type, a type without a
// limit reported, the jobs without a start counted; a plan and a shadow
// sweep read the same.
func TestSweep_TableLimitsAndTypesTravelInOneRoundTrip(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		simple   bool
		postgres bool
	}{{false, false}, {true, false}, {false, true}, {true, true}} {
		simple := c.simple
		t.Run(fmt.Sprintf("simple=%v/markers_in_postgres=%v", simple, c.postgres), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env := testenv.New(t)
			jobs := fixture.Create(t, env, fixture.Default)
			env.Exec(reclaim.Migration)
			env.Exec(`INSERT INTO job_type_limits VALUES ('chapter', '30 minutes'), ('video', '30 minutes'),
				('export', '30 minutes')`)
			env.Exec(`UPDATE job_type_limits SET mode = 'off' WHERE job_type = 'video'`)
			pool, trips := tracedPool(t, env, simple)
			tl, err := reclaim.NewTableLimits(reclaim.TableLimitsConfig{DB: pool})
			require.NoError(t, err)
			chapter := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
			jobs.Insert(t, fixture.Job{Type: "video", Generation: 1, UpdatedAgo: 2 * time.Hour})
			jobs.Insert(t, fixture.Job{Type: "mystery", Generation: 1, UpdatedAgo: 2 * time.Hour})
			for range 2 {
				id := jobs.Insert(t, fixture.Job{Type: "export", Generation: 1, UpdatedAgo: 2 * time.Hour})
				env.Exec(fmt.Sprintf("UPDATE %s SET %s = NULL WHERE id = $1", jobs.Table.QualifiedName(),
					ident.Quote(jobs.Table.StartedAtColumn)), id)
			}
			guard := jobs.Guard
			if c.postgres {
				guard = jobs.NoRedis(t)
			}
			r, _ := newReclaimer(t, jobs, reclaim.Config{Guard: guard, DB: pool, Limits: tl})
			reclaim.SetCountBudget(r, time.Minute)

			plan, err := r.Plan(ctx)
			require.NoError(t, err)
			require.Equal(t, 2, plan.Report.NoStartTime)

			before := trips.Load()
			rep, err := r.Sweep(ctx)
			require.NoError(t, err)
			require.Equal(t, int64(3), trips.Load()-before, "the batch, the page, the write")
			require.Equal(t, reclaim.Report{Scanned: 3, NoStartTime: 2, UnknownType: 1, Paused: 1, Reclaimed: 1,
				ReclaimedIDs: []string{chapter}}, rep)

			if c.postgres {
				store, err := marker.NewPostgresStore(guard, marker.Config{})
				require.NoError(t, err)
				m, found, err := store.Read(ctx, env.Pool, chapter)
				require.NoError(t, err)
				require.True(t, found, "the marker committed with the reclaim")
				require.Equal(t, marker.Marker{JobID: chapter, Generation: 1, Reason: jobguard.ReclaimedReasonDefault, At: m.At}, m)
			}

			shadow, _ := newReclaimer(t, jobs, reclaim.Config{Guard: guard, DB: pool, Limits: tl, Shadow: true})
			reclaim.SetCountBudget(shadow, time.Minute)
			rep, err = shadow.Sweep(ctx)
			require.NoError(t, err)
			require.Equal(t, reclaim.Report{Scanned: 2, NoStartTime: 2, UnknownType: 1, Paused: 1}, rep)
		})
	}
}

// Limits that cannot travel with the types and the count (limits from
// code, a limits table without the mode column, one on another handle)
// read as before, and the types and the count still come out right; a
// limit that is not positive still fails the sweep naming its type.
func TestSweep_LimitsOutsideTheBatchReadAsBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	env.Exec(`CREATE TABLE job_type_limits (job_type text PRIMARY KEY, max_runtime interval NOT NULL)`)
	env.Exec(`INSERT INTO job_type_limits VALUES ('chapter', '30 minutes')`)
	pool, _ := tracedPool(t, env, false)
	insertUnstarted(t, jobs)

	onPool, err := reclaim.NewTableLimits(reclaim.TableLimitsConfig{DB: pool})
	require.NoError(t, err)
	elsewhere, err := reclaim.NewTableLimits(reclaim.TableLimitsConfig{DB: env.Pool})
	require.NoError(t, err)
	for name, limits := range map[string]reclaim.Limits{
		"no mode column": onPool, "another handle": elsewhere,
		"code": reclaim.StaticLimits{"chapter": 30 * time.Minute},
	} {
		stalled := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
		jobs.Insert(t, fixture.Job{Type: "mystery", Generation: 1, UpdatedAgo: 2 * time.Hour})
		r, _ := newReclaimer(t, jobs, reclaim.Config{DB: pool, Limits: limits})
		rep, err := r.Sweep(ctx)
		require.NoError(t, err, name)
		require.Equal(t, []string{stalled}, rep.ReclaimedIDs, name)
		require.Equal(t, 1, rep.NoStartTime, name)
		require.Positive(t, rep.UnknownType, name)
	}

	env.Exec(`INSERT INTO job_type_limits VALUES ('video', '-1 day')`)
	id := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
	r, _ := newReclaimer(t, jobs, reclaim.Config{DB: pool, Limits: onPool})
	rep, err := r.Sweep(ctx)
	require.ErrorContains(t, err, `"video"`)
	require.ErrorContains(t, err, "not positive")
	require.Zero(t, rep.Reclaimed)
	require.Equal(t, "PROCESSING", jobs.Read(t, id).Status)
}

// The count's budget is the session's statement timeout when that is
// shorter, never a longer one, and it ends with the batch: a sweep over a
// source on one connection counts in the batch and leaves the
// connection's own timeout as it was, in either protocol.
func TestSweep_CountBudgetKeepsAShorterTimeoutAndEndsWithTheBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	// The session's timeout is read back as an interval: in every
	// IntervalStyle and time zone a session may have.
	for _, style := range []string{"postgres", "postgres_verbose", "sql_standard", "iso_8601"} {
		for session, want := range map[string]string{"0": "10min", "5min": "5min", "1500ms": "1500ms",
			"10min": "10min", "1h": "10min", "2d": "10min"} {
			err := pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "SELECT set_config('statement_timeout', $1, true), set_config('IntervalStyle', $2, true),"+
					" set_config('TimeZone', 'Asia/Seoul', true)", session, style); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, reclaim.BudgetSQL, (10 * time.Minute).Milliseconds()); err != nil {
					return err
				}
				var got string
				if err := tx.QueryRow(ctx, "SHOW statement_timeout").Scan(&got); err != nil {
					return err
				}
				require.Equal(t, want, got, "session %s, IntervalStyle %s", session, style)
				return nil
			})
			require.NoError(t, err, session)
		}
	}

	insertUnstarted(t, jobs)
	for _, simple := range []bool{false, true} {
		cfg, err := pgx.ParseConfig(env.DatabaseURL)
		require.NoError(t, err)
		trips := &benchkit.RoundTrips{}
		cfg.Tracer = trips
		if simple {
			cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		}
		conn, err := pgx.ConnectConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		_, err = conn.Exec(ctx, "SET statement_timeout = '5min'")
		require.NoError(t, err)
		stalled := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
		table, err := reclaim.NewTableSource(jobs.Guard, conn)
		require.NoError(t, err)
		r, _ := newReclaimer(t, jobs, reclaim.Config{Source: table})
		reclaim.SetCountBudget(r, time.Minute)

		before := trips.Load()
		rep, err := r.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{stalled}, rep.ReclaimedIDs, "simple=%v", simple)
		require.Equal(t, 1, rep.NoStartTime, "simple=%v", simple)
		require.Equal(t, int64(2), trips.Load()-before, "simple=%v: the batch and the page on the source's connection", simple)
		var got string
		require.NoError(t, conn.QueryRow(ctx, "SHOW statement_timeout").Scan(&got))
		require.Equal(t, "5min", got, "simple=%v", simple)
	}
}
