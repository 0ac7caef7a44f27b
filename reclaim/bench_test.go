package reclaim_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/benchkit"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/reclaim"
)

// benchTable is a jobs table of a production shape: finished rows, running
// jobs within their limit, and stuck ones (started two hours ago, no
// progress for an hour) under a 30-minute limit.
type benchTable struct {
	jobs    *fixture.Jobs
	pool    *pgxpool.Pool // counts round trips
	trips   *benchkit.RoundTrips
	stuck   []string
	active  int
	limits  *reclaim.TableLimits
	markers *marker.RedisStore
	// guard writes its markers in Postgres, in the reclaim's statement.
	pgGuard *jobguard.Guard
}

func newBenchTable(b *testing.B, finished, active, stuck int) *benchTable {
	b.Helper()
	ctx := context.Background()
	env := testenv.New(b, testenv.Config{MaxConns: 4})
	jobs := fixture.Create(b, env, fixture.Default)
	env.Exec(reclaim.Migration)
	env.Exec(`INSERT INTO job_type_limits VALUES ('chapter', '30 minutes')`)
	env.Exec(`
INSERT INTO jobs (type, status, generation, parent_id, started_at, updated_at)
SELECT 'chapter', 'COMPLETED', 1, 'course-' || i, now() - interval '1 day', now() - interval '23 hours'
FROM generate_series(1, $1::int) AS i`, finished)
	env.Exec(`
INSERT INTO jobs (type, status, generation, parent_id, started_at, updated_at)
SELECT 'chapter', 'PROCESSING', 1, 'course-' || i,
       now() - CASE WHEN i <= $2 THEN interval '2 hours' ELSE interval '5 minutes' END,
       now() - CASE WHEN i <= $2 THEN interval '1 hour' ELSE interval '1 minute' END
FROM generate_series(1, $1::int) AS i`, active, stuck)
	env.Exec(`VACUUM ANALYZE jobs`)
	rows, err := env.Pool.Query(ctx, `SELECT id::text FROM jobs WHERE status = 'PROCESSING' AND started_at < now() - interval '1 hour'`)
	require.NoError(b, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(b, err)
	require.Len(b, ids, stuck)

	cfg, err := pgxpool.ParseConfig(env.DatabaseURL)
	require.NoError(b, err)
	trips := &benchkit.RoundTrips{}
	cfg.ConnConfig.Tracer = trips
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	limits, err := reclaim.NewTableLimits(reclaim.TableLimitsConfig{DB: pool})
	require.NoError(b, err)
	markers, err := marker.NewRedisStore(jobs.Guard, env.Redis, marker.Config{})
	require.NoError(b, err)
	return &benchTable{jobs: jobs, pool: pool, trips: trips, stuck: ids, active: active, limits: limits, markers: markers,
		pgGuard: jobs.NoRedis(b)}
}

// reset puts the stuck jobs back as they were and drops their markers,
// outside the timer.
func (t *benchTable) reset() error {
	ctx := context.Background()
	if _, err := t.jobs.Env.Pool.Exec(ctx, `UPDATE jobs SET status = 'PROCESSING', failure_reason = NULL,
       updated_at = now() - interval '1 hour' WHERE id = ANY($1::uuid[])`, t.stuck); err != nil {
		return err
	}
	if _, err := t.jobs.Env.Pool.Exec(ctx, `DELETE FROM job_reclaim_markers`); err != nil {
		return err
	}
	keys := make([]string, len(t.stuck))
	for i, id := range t.stuck {
		keys[i] = t.markers.Key(id)
	}
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		if err := t.jobs.Env.Redis.Del(ctx, keys[:n]...).Err(); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}

// measure runs op once per iteration between resets and reports the round
// trips it took.
func (t *benchTable) measure(b *testing.B, op func() error) {
	var trips int64
	for b.Loop() {
		b.StopTimer()
		require.NoError(b, t.reset())
		before := t.trips.Load()
		b.StartTimer()
		err := op()
		b.StopTimer()
		trips += t.trips.Load() - before
		require.NoError(b, err)
		b.StartTimer()
	}
	b.ReportMetric(float64(trips)/float64(b.N), "statements/op")
}

// benchRunning are the numbers of running jobs BenchmarkSweep sweeps: 1k
// and 10k, and 100k with JOBGUARD_BENCH_LARGE=1.
func benchRunning() []int {
	if benchkit.Large() {
		return []int{1_000, 10_000, 100_000}
	}
	return []int{1_000, 10_000}
}

// BenchmarkSweep is one sweep next to its floor, in interleaved rounds
// (see benchkit.Rounds): the SQL a careful engineer would write by hand
// for the same effect and the same guarantees. The floor reads the limits
// table, reads the jobs over their limit (a per-type started_at < cutoff
// SELECT on the partial index, with the database's clock), checks that
// they made no progress, and fails them in one statement that skips rows
// another transaction holds (FOR NO KEY UPDATE SKIP LOCKED) and matches
// status, updated_at and generation, and writes their markers: in
// Postgres, in the same statement (a data-modifying CTE of the rows it
// failed), never lowering a live marker's generation; in Redis, after it,
// through the marker store's script. The table
// holds 100k finished rows (JOBGUARD_BENCH_FINISHED) beside 1k, 10k (and,
// with JOBGUARD_BENCH_LARGE=1, 100k) running jobs, 1% or 10% of them
// stuck; the brake is off (its caps would hold most of them back).
//
// Beside the sweep with a logger that is never enabled, "info" is the same
// sweep logging at info to a handler that writes nowhere, its ratio taken
// to the sweep's: the price of a logger, which should build nothing for a
// line it does not write. Allocations are per reclaimed job.
//
//	go test ./reclaim -run '^$' -bench 'Sweep$' -benchtime 10x -timeout 60m
//	JOBGUARD_BENCH_LARGE=1 go test ./reclaim -run '^$' -bench 'Sweep$' -benchtime 10x -timeout 60m
func BenchmarkSweep(b *testing.B) {
	finished := 100_000
	if v, err := strconv.Atoi(os.Getenv("JOBGUARD_BENCH_FINISHED")); err == nil {
		finished = v
	}
	for _, active := range benchRunning() {
		for _, pct := range []int{1, 10} {
			stuck := active * pct / 100
			b.Run(fmt.Sprintf("running=%d/stuck=%d", active, stuck), func(b *testing.B) {
				t := newBenchTable(b, finished, active, stuck)
				ctx := context.Background()
				for _, backend := range []string{"postgres", "redis"} {
					b.Run("markers="+backend, func(b *testing.B) {
						guard := t.jobs.Guard
						if backend == "postgres" {
							guard = t.pgGuard
						}
						newSweep := func(log *slog.Logger) func() error {
							r, _ := newReclaimer(b, t.jobs, reclaim.Config{Guard: guard, DB: t.pool, Limits: t.limits,
								Brake: noBrake, Logger: log})
							return func() error {
								rep, err := r.Sweep(ctx)
								if err == nil && rep.Reclaimed != stuck {
									err = fmt.Errorf("reclaimed %d of %d: %+v", rep.Reclaimed, stuck, rep)
								}
								return err
							}
						}
						info := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
						benchkit.Rounds(b, t.trips, stuck, "job",
							benchkit.Op{Name: "floor", Reset: t.reset, Run: func() error { return floorSweep(ctx, t, backend, stuck) }},
							benchkit.Op{Name: "sweep", Reset: t.reset, Run: newSweep(slog.New(slog.DiscardHandler))},
							benchkit.Op{Name: "info", Reset: t.reset, Run: newSweep(info), Versus: "sweep"},
						)
					})
				}
			})
		}
	}
}

// BenchmarkSweep_Shadow is a shadow sweep next to its floor: the same
// read, and no write.
//
//	go test ./reclaim -run '^$' -bench 'Sweep_Shadow' -benchtime 10x -timeout 30m
func BenchmarkSweep_Shadow(b *testing.B) {
	t := newBenchTable(b, 100_000, 10_000, 1_000)
	ctx := context.Background()
	r, _ := newReclaimer(b, t.jobs, reclaim.Config{DB: t.pool, Limits: t.limits, Shadow: true, Brake: noBrake,
		Logger: slog.New(slog.DiscardHandler)})
	benchkit.Rounds(b, t.trips, len(t.stuck), "job",
		benchkit.Op{Name: "floor", Run: func() error {
			ids, _, _, err := floorRead(ctx, t)
			if err == nil && len(ids) != len(t.stuck) {
				err = fmt.Errorf("floor read %d of %d", len(ids), len(t.stuck))
			}
			return err
		}},
		benchkit.Op{Name: "shadow", Run: func() error {
			rep, err := r.Sweep(ctx)
			if err == nil && rep.WouldReclaim != len(t.stuck) {
				err = fmt.Errorf("would reclaim %d of %d: %+v", rep.WouldReclaim, len(t.stuck), rep)
			}
			return err
		}},
	)
}

// floorRead is the hand-written read of floorSweep: the limits, then the
// stuck jobs' ids, updated_at and generations, judged on the database's
// clock.
func floorRead(ctx context.Context, t *benchTable) (ids []uuid.UUID, updated []time.Time, gens []int64, err error) {
	var limitUS int64
	if err := t.pool.QueryRow(ctx, `SELECT (extract(epoch FROM max_runtime) * 1000000)::int8 FROM job_type_limits WHERE job_type = 'chapter'`).Scan(&limitUS); err != nil {
		return nil, nil, nil, err
	}
	rows, err := t.pool.Query(ctx, `
SELECT id, updated_at, generation, statement_timestamp() FROM jobs
WHERE status = 'PROCESSING' AND type = 'chapter' AND started_at > '-infinity'
  AND started_at < statement_timestamp() - $1::int8 * interval '1 microsecond'`, limitUS)
	if err != nil {
		return nil, nil, nil, err
	}
	var id uuid.UUID
	var at, now time.Time
	var gen int64
	_, err = pgx.ForEachRow(rows, []any{&id, &at, &gen, &now}, func() error {
		if now.Sub(at) >= reclaim.NoProgressDefault {
			ids, updated, gens = append(ids, id), append(updated, at), append(gens, gen)
		}
		return nil
	})
	return ids, updated, gens, err
}

// floorFail is the floor's write: the stuck jobs still as read, skipping
// the rows another transaction holds.
const floorFail = `
WITH l AS (SELECT e.*, t.ctid AS tid FROM unnest($1::uuid[], $2::timestamptz[], $3::int8[]) AS e(id, updated_at, generation)
           JOIN jobs AS t ON t.id = e.id FOR NO KEY UPDATE OF t SKIP LOCKED)
UPDATE jobs AS t SET status = 'FAILED', failure_reason = $4, updated_at = statement_timestamp() FROM l
WHERE t.ctid = l.tid AND t.status = 'PROCESSING' AND t.updated_at = l.updated_at AND t.generation = l.generation
RETURNING t.id::text, t.generation`

// floorFailMarked is the floor's write with the markers in Postgres:
// floorFail, and the markers of the rows it failed in the same statement,
// never lowering a live marker's generation.
const floorFailMarked = `
WITH l AS (SELECT e.*, t.ctid AS tid FROM unnest($1::uuid[], $2::timestamptz[], $3::int8[]) AS e(id, updated_at, generation)
           JOIN jobs AS t ON t.id = e.id FOR NO KEY UPDATE OF t SKIP LOCKED),
f AS (UPDATE jobs AS t SET status = 'FAILED', failure_reason = $4, updated_at = statement_timestamp() FROM l
      WHERE t.ctid = l.tid AND t.status = 'PROCESSING' AND t.updated_at = l.updated_at AND t.generation = l.generation
      RETURNING t.id, t.generation),
m AS (INSERT INTO job_reclaim_markers AS m (jobs_table, job_id, generation, reason, reclaimed_at, expires_at)
      SELECT $5, f.id::text, f.generation, $4, statement_timestamp(), statement_timestamp() + interval '7 days'
      FROM f ORDER BY f.id::text
      ON CONFLICT (jobs_table, job_id) DO UPDATE SET generation = excluded.generation, reason = excluded.reason,
        reclaimed_at = excluded.reclaimed_at, expires_at = excluded.expires_at
      WHERE m.generation <= excluded.generation OR m.expires_at <= statement_timestamp())
SELECT f.id::text, f.generation FROM f`

// floorSweep is the hand-written reclaim that BenchmarkSweep compares with:
// with markers in Postgres, the fail and the markers in one statement;
// with markers in Redis, the fail, then the markers through the store.
func floorSweep(ctx context.Context, t *benchTable, backend string, want int) error {
	ids, updated, gens, err := floorRead(ctx, t)
	if err != nil {
		return err
	}
	var done []string
	var doneGens []int64
	write := func(sql string, args ...any) error {
		rows, err := t.pool.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		var s string
		var gen int64
		_, err = pgx.ForEachRow(rows, []any{&s, &gen}, func() error {
			done, doneGens = append(done, s), append(doneGens, gen)
			return nil
		})
		return err
	}
	if backend == "postgres" {
		err = write(floorFailMarked, ids, updated, gens, jobguard.ReclaimedReasonDefault, t.pgGuard.TableKey())
	} else if err = write(floorFail, ids, updated, gens, jobguard.ReclaimedReasonDefault); err == nil {
		ms := make([]marker.Marker, len(done))
		for i, id := range done {
			ms[i] = marker.Marker{JobID: id, Generation: doneGens[i], Reason: jobguard.ReclaimedReasonDefault}
		}
		err = t.markers.Write(ctx, ms...)
	}
	if err != nil {
		return err
	}
	if len(done) != want {
		return fmt.Errorf("floor reclaimed %d of %d", len(done), want)
	}
	return nil
}

// BenchmarkSweep_QueueSource is one sweep over a queue's listing of every
// running job (ids and start times only, as BullMQ gives them), so the sweep
// reads the rows of the jobs over their limit itself.
//
//	go test ./reclaim -run '^$' -bench Sweep_QueueSource -benchtime 10x -timeout 30m
func BenchmarkSweep_QueueSource(b *testing.B) {
	t := newBenchTable(b, 1_000_000, 100_000, 10_000)
	ctx := context.Background()
	rows, err := t.pool.Query(ctx, `SELECT id::text, type, started_at FROM jobs WHERE status = 'PROCESSING'`)
	require.NoError(b, err)
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (reclaim.ActiveJob, error) {
		var j reclaim.ActiveJob
		return j, r.Scan(&j.ID, &j.Type, &j.StartedAt)
	})
	require.NoError(b, err)
	r, _ := newReclaimer(b, t.jobs, reclaim.Config{DB: t.pool, Limits: t.limits, Source: listSource(list),
		Brake: noBrake, Logger: slog.New(slog.DiscardHandler)})
	t.measure(b, func() error {
		rep, err := r.Sweep(ctx)
		if err == nil && rep.Reclaimed != len(t.stuck) {
			err = fmt.Errorf("reclaimed %d of %d: %+v", rep.Reclaimed, len(t.stuck), rep)
		}
		return err
	})
}

// BenchmarkSuggest reads the history of a table of finished jobs of five
// types, spread over thirty days, with the bundled index on the finished
// jobs, next to its floor: the same per-type LATERAL read and aggregates
// written by hand. Sizes vary the finished rows at a fixed PerType, so the
// cost reads as a function of the table's size.
//
//	go test ./reclaim -run '^$' -bench Suggest -benchtime 20x -timeout 30m
func BenchmarkSuggest(b *testing.B) {
	types := []string{"chapter", "export", "quiz", "summary", "video"}
	for _, finished := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("finished=%d", finished), func(b *testing.B) {
			ctx := context.Background()
			env := testenv.New(b, testenv.Config{MaxConns: 4})
			jobs := fixture.Create(b, env, fixture.Default)
			env.Exec(reclaim.Migration)
			env.Exec(`
INSERT INTO jobs (type, status, generation, started_at, updated_at)
SELECT ($2::text[])[1 + i % 5], CASE WHEN i % 50 = 0 THEN 'FAILED' ELSE 'COMPLETED' END, 1,
       t - (1 + i % 97) * interval '1 minute', t
FROM generate_series(1, $1::int) AS i, LATERAL (SELECT now() - (i % 43200) * interval '1 minute' AS t) AS s`, finished, types)
			env.Exec(`VACUUM ANALYZE jobs`)
			r, _ := newReclaimer(b, jobs, reclaim.Config{Logger: slog.New(slog.DiscardHandler)})
			spec := reclaim.SuggestSpec{Types: types}
			b.Run("suggest", func(b *testing.B) {
				for b.Loop() {
					got, err := r.Suggest(ctx, spec)
					require.NoError(b, err)
					require.Len(b, got, len(types))
					require.Positive(b, got[0].Completed)
					require.LessOrEqual(b, got[0].Completed+got[0].Reclaimed+got[0].Failed, reclaim.SuggestPerTypeDefault)
				}
			})
			b.Run("floor", func(b *testing.B) {
				for b.Loop() {
					rows, err := env.Pool.Query(ctx, `
SELECT k.type, count(*) FILTER (WHERE j.status = 'COMPLETED'),
       percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (ORDER BY j.secs) FILTER (WHERE j.status = 'COMPLETED'),
       max(j.secs) FILTER (WHERE j.status = 'COMPLETED')
FROM unnest($1::text[]) AS k(type)
CROSS JOIN LATERAL (
    SELECT status, extract(epoch FROM updated_at - started_at) AS secs FROM jobs
    WHERE type = k.type AND status IN ('COMPLETED', 'FAILED') AND updated_at >= now() - interval '7 days'
      AND started_at IS NOT NULL
    ORDER BY updated_at DESC LIMIT 10000) AS j
GROUP BY k.type`, types)
					require.NoError(b, err)
					n := 0
					for rows.Next() {
						n++
					}
					require.NoError(b, rows.Err())
					require.Equal(b, len(types), n)
				}
			})
		})
	}
}
