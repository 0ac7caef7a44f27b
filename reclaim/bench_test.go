package reclaim_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/fixture"
	"github.com/jobguard/jobguard/internal/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
)

const (
	benchActive      = 10_000
	benchReclaimable = 1_000
)

// roundTrips counts the statements a pool sends; each is one round trip.
type roundTrips struct{ n atomic.Int64 }

func (c *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// benchJobs creates 10,000 PROCESSING jobs: the first 1,000 started two
// hours ago and stalled for an hour (reclaimable), the rest started five
// minutes ago (within their limit). It returns a pool that counts round
// trips, and the ids of the reclaimable jobs.
func benchJobs(b *testing.B) (*fixture.Jobs, *pgxpool.Pool, *roundTrips, []string) {
	b.Helper()
	env := testenv.New(b)
	jobs := fixture.Create(b, env, fixture.Default)
	env.Exec(reclaim.Migration)
	env.Exec(`INSERT INTO job_type_limits VALUES ('chapter', '30 minutes')`)
	env.Exec(`
INSERT INTO jobs (type, status, generation, parent_id, started_at, updated_at)
SELECT 'chapter', 'PROCESSING', 1, 'course-' || i,
       now() - CASE WHEN i <= $2 THEN interval '2 hours' ELSE interval '5 minutes' END,
       now() - CASE WHEN i <= $2 THEN interval '1 hour' ELSE interval '1 minute' END
FROM generate_series(1, $1::int) AS i`, benchActive, benchReclaimable)
	env.Exec(`CREATE TABLE courses (id text PRIMARY KEY, status text NOT NULL)`)
	env.Exec(`INSERT INTO courses SELECT parent_id, 'READY' FROM jobs`)
	rows, err := env.Pool.Query(context.Background(),
		`SELECT id::text FROM jobs WHERE started_at < now() - interval '1 hour'`)
	require.NoError(b, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(b, err)
	require.Len(b, ids, benchReclaimable)

	cfg, err := pgxpool.ParseConfig(env.DatabaseURL)
	require.NoError(b, err)
	counter := &roundTrips{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	return jobs, pool, counter, ids
}

// resetBench puts the reclaimed jobs back as they were, outside the timer.
func resetBench(b *testing.B, jobs *fixture.Jobs) {
	b.Helper()
	jobs.Env.Exec(`UPDATE jobs SET status = 'PROCESSING', failure_reason = NULL,
       updated_at = now() - interval '1 hour' WHERE status = 'FAILED'`)
	jobs.Env.Exec(`UPDATE courses SET status = 'READY' WHERE status = 'FAILED'`)
}

// BenchmarkSweep is one sweep over 10,000 active jobs of which 1,000 are
// reclaimed, with the limits read from their table and the markers written:
// over the table itself, over a queue's list (ids and start times), and over
// the list with a parent rule failing each job's course in the same
// transaction.
func BenchmarkSweep(b *testing.B) {
	for _, src := range []string{"table-source", "list-source", "list-source/parent-rule"} {
		b.Run(src, func(b *testing.B) {
			jobs, pool, counter, ids := benchJobs(b)
			cfg := reclaim.Config{DB: pool, Limits: reclaim.TableLimits{DB: pool}, Logger: slog.New(slog.DiscardHandler)}
			if src == "list-source/parent-rule" {
				rule, err := reclaim.SetParent(reclaim.ParentUpdate{Table: "courses", Column: "status", Value: "FAILED"})
				require.NoError(b, err)
				cfg.OnReclaim = map[string]reclaim.ParentRule{"chapter": rule}
			}
			if src != "table-source" {
				// The shape of a queue's answer (BullMQ): ids and start times
				// only, so Sweep reads the candidates' rows itself.
				active, err := jobs.Guard.ActiveJobs(context.Background(), jobs.Env.Pool)
				require.NoError(b, err)
				list := make(listSource, len(active))
				for i, a := range active {
					list[i] = reclaim.ActiveJob{ID: a.ID, Type: a.Type, StartedAt: a.StartedAt}
				}
				cfg.Source = list
			}
			r, _ := newReclaimer(b, jobs, cfg)
			ctx := context.Background()
			var trips int64
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				resetBench(b, jobs)
				before := counter.n.Load()
				b.StartTimer()
				rep, err := r.Sweep(ctx)
				b.StopTimer()
				trips += counter.n.Load() - before
				if err != nil || rep.Reclaimed != len(ids) || rep.Scanned != benchActive {
					b.Fatalf("sweep: %+v, %v", rep, err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/op")
		})
	}
}

// BenchmarkBaseline_OneUpdatePerJob reclaims the same 1,000 jobs with one
// conditional UPDATE each (matched on status, updated_at and generation),
// given their rows: the write alone, no source, limits or markers.
func BenchmarkBaseline_OneUpdatePerJob(b *testing.B) {
	jobs, pool, counter, ids := benchJobs(b)
	ctx := context.Background()
	snap, err := jobs.Guard.Snapshot(ctx, pool, ids)
	require.NoError(b, err)
	var trips int64
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		resetBench(b, jobs)
		snap, err = jobs.Guard.Snapshot(ctx, pool, ids)
		require.NoError(b, err)
		before := counter.n.Load()
		b.StartTimer()
		for _, id := range ids {
			s := snap[id]
			tag, err := pool.Exec(ctx, `UPDATE jobs SET status = 'FAILED', failure_reason = $5, updated_at = now()
WHERE id = $1 AND status = $2 AND updated_at = $3 AND generation = $4`,
				s.ID, s.Status, s.UpdatedAt, s.Generation, jobguard.ReclaimedReasonDefault)
			if err != nil || tag.RowsAffected() != 1 {
				b.Fatalf("update %s: %v (%d rows)", id, err, tag.RowsAffected())
			}
		}
		b.StopTimer()
		trips += counter.n.Load() - before
		b.StartTimer()
	}
	b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/op")
}
