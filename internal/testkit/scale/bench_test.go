package scale_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/heartbeat"
	"github.com/jobguard/jobguard/internal/testkit/scale"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/retain"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// Each benchmark runs on both histories, the library's operation beside its
// floor: the plain SQL a careful engineer would write for the same effect.
// What must hold is that a job's cost does not grow with the history.

// eachSize runs fn on both histories, op=guard and op=floor beside each
// other.
func eachSize(b *testing.B, guard, floor func(b *testing.B, bd *bundle)) {
	need(b)
	for _, s := range sizes() {
		b.Run(s.name, func(b *testing.B) {
			bd := open(b, s.size)
			b.Run("op=guard", func(b *testing.B) { guard(b, bd) })
			if floor != nil {
				b.Run("op=floor", func(b *testing.B) { floor(b, bd) })
			}
		})
	}
}

// working returns n running jobs that are not stuck, each as its current
// execution, cycling when n exceeds them.
func (bd *bundle) working(b *testing.B, n int) []jobguard.Execution {
	b.Helper()
	rows, err := bd.pool.Query(context.Background(), `SELECT id::text, generation FROM jobs
		WHERE status = 'PROCESSING' AND type <> 'bench' AND updated_at > now() - interval '30 minutes' LIMIT $1`, n)
	require.NoError(b, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (jobguard.Execution, error) {
		var e jobguard.Execution
		return e, r.Scan(&e.JobID, &e.Generation)
	})
	require.NoError(b, err)
	require.NotEmpty(b, out)
	for len(out) < n {
		out = append(out, out[:min(len(out), n-len(out))]...)
	}
	return out
}

// fresh inserts n running jobs of type bench at generation 1, removed with
// what they wrote to the side tables when b ends.
func (bd *bundle) fresh(b *testing.B, n int) []jobguard.Execution {
	b.Helper()
	ctx := context.Background()
	rows, err := bd.pool.Query(ctx, `INSERT INTO jobs (type, status, generation, started_at, updated_at)
		SELECT 'bench', 'PROCESSING', 1, now(), now() FROM generate_series(1, $1) RETURNING id::text`, n)
	require.NoError(b, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(b, err)
	b.Cleanup(func() {
		for _, sql := range []string{
			`DELETE FROM jobs WHERE id = ANY ($2::uuid[]) AND $1::text IS NOT NULL`,
			`DELETE FROM job_settlements WHERE jobs_table = $1 AND job_id = ANY ($2)`,
			`DELETE FROM usage_ledger WHERE jobs_table = $1 AND job_id = ANY ($2)`,
		} {
			if _, err := bd.pool.Exec(ctx, sql, bd.Key, ids); err != nil {
				b.Errorf("%s: %v", sql, err)
			}
		}
	})
	out := make([]jobguard.Execution, n)
	for i, id := range ids {
		out[i] = jobguard.Execution{JobID: id, Generation: 1}
	}
	return out
}

// BenchmarkStart is StartGuard.Start of a running job (the markers in
// Postgres, read by the start statement itself) beside the plain
// conditional UPDATE that bumps the generation.
func BenchmarkStart(b *testing.B) {
	ctx := context.Background()
	eachSize(b, func(b *testing.B, bd *bundle) {
		sg, err := jobguard.NewStartGuard(bd.guard, nil, jobguard.StartGuardConfig{})
		require.NoError(b, err)
		jobs := bd.working(b, 20000)
		b.ResetTimer()
		for i := range b.N {
			if _, err := sg.Start(ctx, bd.pool, jobs[i%len(jobs)].JobID); err != nil {
				b.Fatal(err)
			}
		}
	}, func(b *testing.B, bd *bundle) {
		jobs := bd.working(b, 20000)
		b.ResetTimer()
		for i := range b.N {
			var gen int64
			if err := bd.pool.QueryRow(ctx, `UPDATE jobs SET status = 'PROCESSING', updated_at = now(), generation = generation + 1,
				started_at = now() WHERE id = $1 AND status IN ('QUEUED', 'PROCESSING') RETURNING generation`,
				jobs[i%len(jobs)].JobID).Scan(&gen); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkBeat is a heartbeat that writes (a job's first beat in this
// process) beside the plain fenced UPDATE of updated_at and progress.
func BenchmarkBeat(b *testing.B) {
	ctx := context.Background()
	eachSize(b, func(b *testing.B, bd *bundle) {
		hb := heartbeat.New(bd.guard, heartbeat.Config{Interval: time.Nanosecond})
		jobs := bd.working(b, 20000)
		b.ResetTimer()
		for i := range b.N {
			r, err := hb.Beat(ctx, bd.pool, jobs[i%len(jobs)], heartbeat.Progress(i%100))
			if err != nil || r != heartbeat.Written {
				b.Fatalf("beat: %v %v", r, err)
			}
		}
	}, func(b *testing.B, bd *bundle) {
		jobs := bd.working(b, 20000)
		b.ResetTimer()
		for i := range b.N {
			e := jobs[i%len(jobs)]
			tag, err := bd.pool.Exec(ctx, `UPDATE jobs SET updated_at = now(), progress = $3
				WHERE id = $1 AND status = 'PROCESSING' AND generation = $2`, e.JobID, e.Generation, i%100)
			if err != nil || tag.RowsAffected() != 1 {
				b.Fatalf("touch: %v %d", err, tag.RowsAffected())
			}
		}
	})
}

// BenchmarkCompleteTx is CompleteTx with nothing else in its transaction
// beside the plain transaction of one conditional UPDATE.
func BenchmarkCompleteTx(b *testing.B) {
	ctx := context.Background()
	eachSize(b, func(b *testing.B, bd *bundle) {
		jobs := bd.fresh(b, b.N)
		b.ResetTimer()
		for i := range b.N {
			if err := bd.guard.CompleteTx(ctx, bd.pool, jobs[i], func(pgx.Tx) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
	}, func(b *testing.B, bd *bundle) {
		jobs := bd.fresh(b, b.N)
		b.ResetTimer()
		for i := range b.N {
			if err := plainComplete(ctx, bd, jobs[i]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func plainComplete(ctx context.Context, bd *bundle, e jobguard.Execution) error {
	return pgx.BeginFunc(ctx, bd.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE jobs SET status = 'COMPLETED', updated_at = now(), progress = 100
			WHERE id = $1 AND status IN ('QUEUED', 'PROCESSING') AND generation = $2`, e.JobID, e.Generation)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("complete %s: %d rows", e.JobID, tag.RowsAffected())
		}
		return err
	})
}

// settler is a Settler of the bundle's table with one update, video, whose
// handler does nothing, and an increment that does nothing: what is
// measured is the records and the ledger.
func (bd *bundle) settler(b *testing.B, cfg settle.Config) *settle.Settler {
	b.Helper()
	cfg.Guard, cfg.DB, cfg.Logger = bd.guard, bd.pool, quiet
	cfg.Handlers = map[string]settle.Handler{"video": func(context.Context, jobguard.Execution, json.RawMessage) error { return nil }}
	cfg.Increments = map[string]settle.Increment{"video_ms": func(context.Context, pgx.Tx, jobguard.Execution, usage.Entry) error { return nil }}
	s, err := settle.New(context.Background(), cfg)
	require.NoError(b, err)
	return s
}

const (
	benchUpdates = `[{"name": "video", "args": {"video_id": "v-1", "duration_ms": 61250}}]`
	benchUsage   = `[{"account": "acct-1", "meter": "video_ms", "quantity": 61250}]`
)

// BenchmarkFinalize is settle's Finalize (the record written with the
// completion, the update marked, the usage billed and the record confirmed
// in one transaction) beside the same four writes in plain SQL.
func BenchmarkFinalize(b *testing.B) {
	ctx := context.Background()
	eachSize(b, func(b *testing.B, bd *bundle) {
		s := bd.settler(b, settle.Config{})
		jobs := bd.fresh(b, b.N)
		spec := settle.Spec{Updates: []settle.Update{{Name: "video", Args: map[string]any{"video_id": "v-1", "duration_ms": 61250}}},
			Usage: []usage.Entry{{Account: "acct-1", Meter: "video_ms", Quantity: 61250}}}
		b.ResetTimer()
		for i := range b.N {
			res, err := s.Finalize(ctx, bd.pool, jobs[i], spec)
			if err != nil || !res.Settled {
				b.Fatalf("finalize: %+v %v", res, err)
			}
		}
	}, func(b *testing.B, bd *bundle) {
		jobs := bd.fresh(b, b.N)
		b.ResetTimer()
		for i := range b.N {
			if err := plainFinalize(ctx, bd, jobs[i]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func plainFinalize(ctx context.Context, bd *bundle, e jobguard.Execution) error {
	err := pgx.BeginFunc(ctx, bd.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE jobs SET status = 'COMPLETED', updated_at = now(), progress = 100
			WHERE id = $1 AND status IN ('QUEUED', 'PROCESSING') AND generation = $2`, e.JobID, e.Generation)
		if err == nil && tag.RowsAffected() != 1 {
			return fmt.Errorf("complete %s: %d rows", e.JobID, tag.RowsAffected())
		}
		if err == nil {
			_, err = tx.Exec(ctx, `INSERT INTO job_settlements (jobs_table, job_id, generation, pending, updates, usage)
				VALUES ($1, $2, $3, '{video}', $4, $5)`, bd.Key, e.JobID, e.Generation, benchUpdates, benchUsage)
		}
		return err
	})
	if err != nil {
		return err
	}
	if _, err := bd.pool.Exec(ctx, `UPDATE job_settlements SET pending = array_remove(pending, 'video')
		WHERE jobs_table = $1 AND job_id = $2 AND generation = $3`, bd.Key, e.JobID, e.Generation); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, bd.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO usage_ledger (jobs_table, job_id, meter, generation, account, quantity)
			VALUES ($1, $2, 'video_ms', $3, 'acct-1', 61250) ON CONFLICT DO NOTHING`, bd.Key, e.JobID, e.Generation)
		if err == nil {
			_, err = tx.Exec(ctx, `UPDATE job_settlements SET state = 'confirmed', settled_at = now(), updated_at = now()
				WHERE jobs_table = $1 AND job_id = $2 AND generation = $3 AND state = 'pending'`, bd.Key, e.JobID, e.Generation)
		}
		return err
	})
}

// stuck returns the ids of the stuck running jobs.
func (bd *bundle) stuck() []string {
	var ids []string
	for i := range bd.Size.Running {
		if bd.Stuck(i) {
			ids = append(ids, scale.Text(scale.ID(scale.RunningBase+i)))
		}
	}
	return ids
}

// unreclaim puts the stuck jobs back as they were loaded, and removes
// their markers.
func (bd *bundle) unreclaim(b *testing.B, ids []string) {
	b.Helper()
	b.StopTimer()
	bd.exec(b, `UPDATE jobs SET status = 'PROCESSING', failure_reason = NULL, updated_at = now() - interval '1 hour'
		WHERE id = ANY ($1::uuid[])`, ids)
	bd.exec(b, `DELETE FROM job_reclaim_markers WHERE jobs_table = $1 AND job_id = ANY ($2)`, bd.Key, ids)
	b.StartTimer()
}

// BenchmarkReclaimSweep is one sweep over the running jobs (100k, 1% stuck)
// that reclaims the stuck ones, markers in Postgres, beside one plain
// UPDATE joining the limits that fails them and writes their markers. The
// table source lists only the jobs over their limit, so a job's cost is
// ns/op divided by the stuck jobs.
func BenchmarkReclaimSweep(b *testing.B) {
	ctx := context.Background()
	eachSize(b, func(b *testing.B, bd *bundle) {
		ids := bd.stuck()
		r, err := reclaim.New(reclaim.Config{Guard: bd.guard, DB: bd.pool, Logger: quiet,
			Brake: reclaim.Brake{MaxJobs: -1, MaxJobsPerType: -1, MaxShare: -1, MaxSharePerType: -1}})
		require.NoError(b, err)
		b.ResetTimer()
		for range b.N {
			rep, err := r.Sweep(ctx)
			require.NoError(b, err)
			require.Equal(b, len(ids), rep.Reclaimed, "%+v", rep)
			bd.unreclaim(b, ids)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ids)), "ns/reclaimed-job")
	}, func(b *testing.B, bd *bundle) {
		ids := bd.stuck()
		b.ResetTimer()
		for range b.N {
			n := bd.exec(b, `WITH failed AS (
				UPDATE jobs j SET status = 'FAILED', failure_reason = $2, updated_at = now()
				FROM job_type_limits l
				WHERE j.status = 'PROCESSING' AND j.type = l.job_type AND l.mode = 'reclaim'
				  AND j.started_at < now() - l.max_runtime AND j.updated_at < now() - interval '15 minutes'
				RETURNING j.id, j.generation)
			INSERT INTO job_reclaim_markers (jobs_table, job_id, generation, reason, reclaimed_at, expires_at)
			SELECT $1, id::text, generation, $2, now(), now() + interval '7 days' FROM failed
			ON CONFLICT (jobs_table, job_id) DO UPDATE SET generation = excluded.generation, reason = excluded.reason,
				reclaimed_at = excluded.reclaimed_at, expires_at = excluded.expires_at`, bd.Key, scale.ReclaimedReason)
			require.EqualValues(b, len(ids), n)
			bd.unreclaim(b, ids)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ids)), "ns/reclaimed-job")
	})
}

// pendingRecords are the records the settle sweep finds due: finalizes
// whose worker died after the completion committed.
const pendingRecords = 1000

// owe makes the bench jobs' records pending and due again, unbilled.
func (bd *bundle) owe(b *testing.B, ids []string) {
	b.Helper()
	b.StopTimer()
	bd.exec(b, `DELETE FROM usage_ledger WHERE jobs_table = $1 AND job_id = ANY ($2)`, bd.Key, ids)
	bd.exec(b, `INSERT INTO job_settlements (jobs_table, job_id, generation, pending, updates, usage, next_attempt_at, created_at)
		SELECT $1, id, 1, '{video}', $3, $4, now() - interval '5 minutes', now() - interval '5 minutes' FROM unnest($2::text[]) AS id
		ON CONFLICT (jobs_table, job_id, generation) DO UPDATE SET state = 'pending', pending = '{video}', attempts = 0,
			next_attempt_at = excluded.next_attempt_at, settled_at = NULL`, bd.Key, ids, benchUpdates, benchUsage)
	b.StartTimer()
}

// BenchmarkSettleSweep is one settle sweep taking the 1k pending records
// among the settled history, beside the plain batch that bills them and
// confirms them in one transaction.
func BenchmarkSettleSweep(b *testing.B) {
	ctx := context.Background()
	setupPending := func(b *testing.B, bd *bundle) []string {
		jobs := bd.fresh(b, pendingRecords)
		ids := make([]string, len(jobs))
		for i, j := range jobs {
			ids[i] = j.JobID
		}
		bd.exec(b, `UPDATE jobs SET status = 'COMPLETED' WHERE id = ANY ($1::uuid[])`, ids)
		return ids
	}
	eachSize(b, func(b *testing.B, bd *bundle) {
		ids := setupPending(b, bd)
		s := bd.settler(b, settle.Config{MaxPerSweep: pendingRecords})
		b.ResetTimer()
		for range b.N {
			bd.owe(b, ids)
			rep, err := s.Sweep(ctx)
			require.NoError(b, err)
			require.Equal(b, pendingRecords, rep.Settled, "%+v", rep)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*pendingRecords), "ns/record")
	}, func(b *testing.B, bd *bundle) {
		ids := setupPending(b, bd)
		b.ResetTimer()
		for range b.N {
			bd.owe(b, ids)
			err := pgx.BeginFunc(ctx, bd.pool, func(tx pgx.Tx) error {
				tag, err := tx.Exec(ctx, `WITH due AS (
					SELECT jobs_table, job_id, generation, usage FROM job_settlements
					WHERE jobs_table = $1 AND state = 'pending' AND next_attempt_at <= now()
					ORDER BY next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED),
				billed AS (
					INSERT INTO usage_ledger (jobs_table, job_id, meter, generation, account, quantity)
					SELECT d.jobs_table, d.job_id, u->>'meter', d.generation, u->>'account', (u->>'quantity')::bigint
					FROM due d, jsonb_array_elements(d.usage) AS u ON CONFLICT DO NOTHING)
				UPDATE job_settlements s SET state = 'confirmed', pending = '{}', settled_at = now(), updated_at = now()
				FROM due d WHERE (s.jobs_table, s.job_id, s.generation) = (d.jobs_table, d.job_id, d.generation)`, bd.Key, pendingRecords)
				if err == nil && tag.RowsAffected() != pendingRecords {
					err = fmt.Errorf("settled %d", tag.RowsAffected())
				}
				return err
			})
			require.NoError(b, err)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*pendingRecords), "ns/record")
	})
}

// BenchmarkSuggest is reclaim's Suggest over the last week (every type,
// the latest 10k completions of each) beside one plain query of the same
// percentile per type through the finished-jobs index.
func BenchmarkSuggest(b *testing.B) {
	ctx := context.Background()
	eachSize(b, func(b *testing.B, bd *bundle) {
		r, err := reclaim.New(reclaim.Config{Guard: bd.guard, DB: bd.pool})
		require.NoError(b, err)
		b.ResetTimer()
		read := 0
		for range b.N {
			s, err := r.Suggest(ctx, reclaim.SuggestSpec{})
			require.NoError(b, err)
			require.Len(b, s, len(scale.Types))
			read = 0
			for _, t := range s {
				read += t.Completed + t.Reclaimed + t.Failed
			}
		}
		b.ReportMetric(float64(read), "jobs-read")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*read), "ns/job-read")
	}, func(b *testing.B, bd *bundle) {
		types := make([]string, len(scale.Types))
		for i, t := range scale.Types {
			types[i] = t.Name
		}
		b.ResetTimer()
		for range b.N {
			rows, err := bd.pool.Query(ctx, `SELECT t, p FROM unnest($1::text[]) AS t, LATERAL (
				SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM j.updated_at - j.started_at)) AS p
				FROM (SELECT updated_at, started_at FROM jobs WHERE type = t AND status IN ('COMPLETED', 'FAILED')
				      AND updated_at > now() - interval '7 days' ORDER BY updated_at DESC LIMIT 10000) AS j) AS x`, types)
			require.NoError(b, err)
			n := 0
			for rows.Next() {
				n++
			}
			require.NoError(b, rows.Err())
			require.Equal(b, len(types), n)
		}
	})
}

// BenchmarkPlanOne is what 'jobguard explain' asks of the library for one
// job: a Reclaimer's Plan over a source listing that job alone, and the
// job's row and marker, beside the plain read of the row, its type's limit
// and its marker.
func BenchmarkPlanOne(b *testing.B) {
	ctx := context.Background()
	eachSize(b, func(b *testing.B, bd *bundle) {
		ids := bd.stuck()
		sg, err := jobguard.NewStartGuard(bd.guard, nil, jobguard.StartGuardConfig{})
		require.NoError(b, err)
		b.ResetTimer()
		for i := range b.N {
			id := ids[i%len(ids)]
			r, err := reclaim.New(reclaim.Config{Guard: bd.guard, DB: bd.pool, Source: &oneJob{guard: bd.guard, db: bd.pool, id: id}})
			require.NoError(b, err)
			p, err := r.Plan(ctx)
			require.NoError(b, err)
			require.Len(b, p.Jobs, 1)
			_, _, err = sg.Marker(ctx, bd.pool, id)
			require.NoError(b, err)
		}
	}, func(b *testing.B, bd *bundle) {
		ids := bd.stuck()
		b.ResetTimer()
		for i := range b.N {
			var status string
			require.NoError(b, bd.pool.QueryRow(ctx, `SELECT j.status FROM jobs j
				LEFT JOIN job_type_limits l ON l.job_type = j.type
				LEFT JOIN job_reclaim_markers m ON m.jobs_table = $2 AND m.job_id = j.id::text
				WHERE j.id = $1`, ids[i%len(ids)], bd.Key).Scan(&status))
		}
	})
}

// oneJob lists one job, as explain's source does over the jobs table:
// its row, read with the snapshot a sweep uses.
type oneJob struct {
	guard *jobguard.Guard
	db    jobguard.DB
	id    string
}

func (o *oneJob) Active(ctx context.Context, _ reclaim.Query, page func([]reclaim.ActiveJob) error) error {
	rows, err := jobset.New(o.guard).Snapshot(ctx, o.db, []string{o.id})
	if err != nil {
		return err
	}
	row, ok := rows[o.id]
	if !ok {
		return fmt.Errorf("job %s not found", o.id)
	}
	return page([]reclaim.ActiveJob{{ID: row.ID, Type: row.Type, Row: &row}})
}

// quiet takes the summary lines the sweeps log, which would break the
// benchmarks' output lines.
var quiet = slog.New(slog.DiscardHandler)

// aged is how many rows of each side table the retention benchmark ages.
const aged = 100_000

// BenchmarkRetain is the retention sweep over the three side tables,
// removing 100k settled records, 100k finished artifacts and 100k expired
// markers aged past their retention, copied in beside the history before
// each sweep; beside it, the plain batched DELETE. A worker completes jobs
// all along, and its CompleteTx p99 is reported beside the p99 of the same
// worker with nothing else running.
func BenchmarkRetain(b *testing.B) {
	ctx := context.Background()
	run := func(b *testing.B, bd *bundle, sweep func()) {
		idle := bd.worker(b, nil)
		b.ResetTimer()
		var during []time.Duration
		for range b.N {
			bd.age(b)
			during = append(during, bd.worker(b, sweep)...)
		}
		b.ReportMetric(float64(3*aged*b.N)/b.Elapsed().Seconds(), "rows/s")
		b.ReportMetric(float64(p99(idle).Microseconds()), "idle-p99-µs")
		b.ReportMetric(float64(p99(during).Microseconds()), "during-p99-µs")
	}
	eachSize(b, func(b *testing.B, bd *bundle) {
		s := bd.settler(b, settle.Config{})
		arts, err := compensate.New(ctx, compensate.Config{Guard: bd.guard, DB: bd.pool,
			Compensators: map[string]compensate.Func{"file": func(context.Context, pgx.Tx, compensate.Artifact) error { return nil }}})
		require.NoError(b, err)
		ms, err := marker.NewPostgresStore(bd.guard, marker.Config{})
		require.NoError(b, err)
		sw, err := retain.New(retain.Config{DB: bd.pool, Logger: quiet, Tables: []retain.Table{
			{Rule: s.Retention()}, {Rule: arts.Retention()}, {Rule: ms.Retention()}}})
		require.NoError(b, err)
		run(b, bd, func() {
			rep, err := sw.Sweep(ctx)
			require.NoError(b, err)
			for _, t := range rep.Tables {
				require.EqualValues(b, aged, t.Removed, "%+v", rep)
			}
		})
	}, func(b *testing.B, bd *bundle) {
		run(b, bd, func() {
			for _, sql := range []string{
				`DELETE FROM job_settlements WHERE ctid = ANY (ARRAY(SELECT ctid FROM job_settlements WHERE jobs_table = $1
					AND state IN ('confirmed', 'given_up') AND settled_at < now() - interval '30 days' LIMIT 1000))`,
				`DELETE FROM job_artifacts WHERE ctid = ANY (ARRAY(SELECT ctid FROM job_artifacts WHERE jobs_table = $1
					AND state = 'done' AND changed_at < now() - interval '30 days' LIMIT 1000))`,
				`DELETE FROM job_reclaim_markers WHERE ctid = ANY (ARRAY(SELECT ctid FROM job_reclaim_markers
					WHERE expires_at < now() - interval '1 day' AND $1::text IS NOT NULL LIMIT 1000))`,
			} {
				for {
					n := bd.exec(b, sql, bd.Key)
					if n < 1000 {
						break
					}
				}
			}
		})
	})
}

// age copies in, with the timer stopped, aged rows of each side table
// that the retention sweep removes: settled records and compensated
// artifacts 40 days old, and markers that expired 2 days ago.
func (bd *bundle) age(b *testing.B) {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	bd.copyAged(b)
}

// copyAged copies in aged rows of each side table.
func (bd *bundle) copyAged(b testing.TB) {
	b.Helper()
	ctx := context.Background()
	old := time.Now().Add(-40 * 24 * time.Hour)
	n := 0
	next := func() string { n++; return fmt.Sprintf("aged-%d-%d", time.Now().UnixNano(), n) }
	copies := []struct {
		table string
		cols  []string
		row   func() []any
	}{
		{"job_settlements", []string{"jobs_table", "job_id", "generation", "state", "updates", "usage", "created_at", "updated_at", "settled_at"},
			func() []any {
				return []any{bd.Key, next(), int64(1), "confirmed", benchUpdates, benchUsage, old, old, old}
			}},
		{"job_artifacts", []string{"jobs_table", "job_id", "generation", "kind", "ref", "state", "created_at", "updated_at", "changed_at"},
			func() []any {
				id := next()
				return []any{bd.Key, id, int64(1), "file", "s3://media/" + id, "done", old, old, old}
			}},
		{"job_reclaim_markers", []string{"jobs_table", "job_id", "generation", "reason", "reclaimed_at", "expires_at"},
			func() []any {
				return []any{bd.Key, next(), int64(1), scale.ReclaimedReason, old, time.Now().Add(-48 * time.Hour)}
			}},
	}
	for _, cp := range copies {
		i := 0
		_, err := bd.pool.CopyFrom(ctx, pgx.Identifier{cp.table}, cp.cols, pgx.CopyFromFunc(func() ([]any, error) {
			if i++; i > aged {
				return nil, nil
			}
			return cp.row(), nil
		}))
		require.NoError(b, err)
	}
}

// worker completes fresh jobs one after another, while fn runs (or for a
// second when fn is nil), and returns each CompleteTx's duration.
func (bd *bundle) worker(b *testing.B, fn func()) []time.Duration {
	b.Helper()
	ctx := context.Background()
	b.StopTimer()
	jobs := bd.fresh(b, 20000)
	b.StartTimer()
	var (
		wg   sync.WaitGroup
		stop = make(chan struct{})
		took []time.Duration
	)
	wg.Go(func() {
		for _, j := range jobs {
			select {
			case <-stop:
				return
			default:
			}
			t0 := time.Now()
			if err := bd.guard.CompleteTx(ctx, bd.pool, j, func(pgx.Tx) error { return nil }); err != nil {
				b.Error(err)
				return
			}
			took = append(took, time.Since(t0))
		}
	})
	if fn == nil {
		time.Sleep(time.Second)
	} else {
		fn()
	}
	close(stop)
	wg.Wait()
	return took
}

func p99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)*99/100]
}
