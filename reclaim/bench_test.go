package reclaim_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/reclaim"
)

// roundTrips counts the statements a pool sends; each is one round trip.
type roundTrips struct{ n atomic.Int64 }

func (c *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// benchTable is a jobs table of a production shape: finished rows, running
// jobs within their limit, and stuck ones (started two hours ago, no
// progress for an hour) under a 30-minute limit.
type benchTable struct {
	jobs    *fixture.Jobs
	pool    *pgxpool.Pool // counts round trips
	trips   *roundTrips
	stuck   []string
	active  int
	limits  *reclaim.TableLimits
	markers *marker.RedisStore
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
	trips := &roundTrips{}
	cfg.ConnConfig.Tracer = trips
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	limits, err := reclaim.NewTableLimits(reclaim.TableLimitsConfig{DB: pool})
	require.NoError(b, err)
	markers, err := marker.NewRedisStore(jobs.Guard, env.Redis, marker.Config{})
	require.NoError(b, err)
	return &benchTable{jobs: jobs, pool: pool, trips: trips, stuck: ids, active: active, limits: limits, markers: markers}
}

// reset puts the stuck jobs back as they were and drops their markers,
// outside the timer.
func (t *benchTable) reset(b *testing.B) {
	b.Helper()
	t.jobs.Env.Exec(`UPDATE jobs SET status = 'PROCESSING', failure_reason = NULL,
       updated_at = now() - interval '1 hour' WHERE id = ANY($1::uuid[])`, t.stuck)
	keys := make([]string, len(t.stuck))
	for i, id := range t.stuck {
		keys[i] = t.markers.Key(id)
	}
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		require.NoError(b, t.jobs.Env.Redis.Del(context.Background(), keys[:n]...).Err())
		keys = keys[n:]
	}
}

// measure runs op once per iteration between resets and reports the round
// trips it took.
func (t *benchTable) measure(b *testing.B, op func() error) {
	var trips int64
	for b.Loop() {
		b.StopTimer()
		t.reset(b)
		before := t.trips.n.Load()
		b.StartTimer()
		err := op()
		b.StopTimer()
		trips += t.trips.n.Load() - before
		require.NoError(b, err)
		b.StartTimer()
	}
	b.ReportMetric(float64(trips)/float64(b.N), "statements/op")
}

// BenchmarkSweep is one sweep over a table of 1M finished rows beside its
// running jobs, a tenth of them stuck (the brake off: its caps would hold
// most of them back), next to its floor: the SQL a careful
// engineer would write by hand for the same effect (a per-type
// started_at < cutoff SELECT on the partial index, the no-progress check,
// and one typed unnest UPDATE matched on status, updated_at and
// generation), plus the same markers as plain pipelined SETs. Sizes vary the
// running jobs at a fixed stuck count, and the stuck count at a fixed
// number of running jobs, so the cost reads as a function of each.
//
//	go test ./reclaim -run '^$' -bench Sweep -benchtime 10x -timeout 30m
func BenchmarkSweep(b *testing.B) {
	const finished = 1_000_000
	for _, size := range []struct{ active, stuck int }{
		{10_000, 1_000}, {100_000, 1_000}, {100_000, 10_000},
	} {
		b.Run(fmt.Sprintf("active=%d/stuck=%d", size.active, size.stuck), func(b *testing.B) {
			t := newBenchTable(b, finished, size.active, size.stuck)
			ctx := context.Background()
			b.Run("table-source", func(b *testing.B) {
				r, _ := newReclaimer(b, t.jobs, reclaim.Config{DB: t.pool, Limits: t.limits, Brake: noBrake, Logger: slog.New(slog.DiscardHandler)})
				t.measure(b, func() error {
					rep, err := r.Sweep(ctx)
					if err == nil && rep.Reclaimed != size.stuck {
						err = fmt.Errorf("reclaimed %d of %d: %+v", rep.Reclaimed, size.stuck, rep)
					}
					return err
				})
			})
			b.Run("floor", func(b *testing.B) {
				t.measure(b, func() error { return floorSweep(ctx, t, size.stuck) })
			})
			// A shadow sweep next to its floor: the same read, and no write.
			b.Run("shadow", func(b *testing.B) {
				r, _ := newReclaimer(b, t.jobs, reclaim.Config{DB: t.pool, Limits: t.limits, Shadow: true, Brake: noBrake, Logger: slog.New(slog.DiscardHandler)})
				t.measure(b, func() error {
					rep, err := r.Sweep(ctx)
					if err == nil && rep.WouldReclaim != size.stuck {
						err = fmt.Errorf("would reclaim %d of %d: %+v", rep.WouldReclaim, size.stuck, rep)
					}
					return err
				})
			})
			b.Run("shadow-floor", func(b *testing.B) {
				t.measure(b, func() error {
					ids, _, _, err := floorRead(ctx, t)
					if err == nil && len(ids) != size.stuck {
						err = fmt.Errorf("floor read %d of %d", len(ids), size.stuck)
					}
					return err
				})
			})
		})
	}
}

// floorRead is the hand-written read of floorSweep: the stuck jobs' ids,
// updated_at and generations.
func floorRead(ctx context.Context, t *benchTable) (ids []uuid.UUID, updated []time.Time, gens []int64, err error) {
	rows, err := t.pool.Query(ctx, `
SELECT id, status, updated_at, generation, now() FROM jobs
WHERE status = 'PROCESSING' AND type = 'chapter' AND started_at < now() - interval '30 minutes'`)
	if err != nil {
		return nil, nil, nil, err
	}
	var id uuid.UUID
	var status string
	var at, now time.Time
	var gen int64
	_, err = pgx.ForEachRow(rows, []any{&id, &status, &at, &gen, &now}, func() error {
		if now.Sub(at) >= reclaim.NoProgressDefault {
			ids, updated, gens = append(ids, id), append(updated, at), append(gens, gen)
		}
		return nil
	})
	return ids, updated, gens, err
}

// floorSweep is the hand-written reclaim that BenchmarkSweep compares with.
func floorSweep(ctx context.Context, t *benchTable, want int) error {
	ids, updated, gens, err := floorRead(ctx, t)
	if err != nil {
		return err
	}
	rows, err := t.pool.Query(ctx, `
UPDATE jobs AS t SET status = 'FAILED', failure_reason = $4, updated_at = now()
FROM unnest($1::uuid[], $2::timestamptz[], $3::int8[]) AS e(id, updated_at, generation)
WHERE t.id = e.id AND t.status = 'PROCESSING' AND t.updated_at = e.updated_at AND t.generation = e.generation
RETURNING t.id::text, t.generation`, ids, updated, gens, jobguard.ReclaimedReasonDefault)
	if err != nil {
		return err
	}
	var done []string
	var doneGens []int64
	var s string
	var gen int64
	_, err = pgx.ForEachRow(rows, []any{&s, &gen}, func() error {
		done, doneGens = append(done, s), append(doneGens, gen)
		return nil
	})
	if err != nil {
		return err
	}
	if len(done) != want {
		return fmt.Errorf("floor reclaimed %d of %d", len(done), want)
	}
	_, err = t.jobs.Env.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range done {
			p.Set(ctx, t.markers.Key(id), fmt.Sprintf(`{"generation":%d}`, doneGens[i]), 7*24*time.Hour)
		}
		return nil
	})
	return err
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
