package settle_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/internal/testkit/benchkit"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// The two metadata updates and the increment of the benchmarks, the same
// statements in both: only what wraps them differs.
const (
	benchVideo   = `UPDATE videos SET status = 'READY', duration_ms = $2 WHERE id = $1`
	benchContent = `INSERT INTO contents (video_id, published) VALUES ($1, true) ON CONFLICT (video_id) DO UPDATE SET published = true`
	benchBill    = `UPDATE accounts SET video_ms = video_ms + $2 WHERE id = $1`
)

// benchJobs inserts n PROCESSING video jobs at generation 1, with their
// videos, and returns their ids.
func benchJobs(b *testing.B, bd *bundle, n int) []string {
	b.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = bd.jobs.Insert(b, fixture.Job{Generation: 1, Type: "video"})
	}
	bd.env.Exec(`INSERT INTO videos (id) SELECT 'video-' || left(i, 8) FROM unnest($1::text[]) AS i`, ids)
	return ids
}

// BenchmarkFinalize is a finalize with two metadata updates and one usage
// entry, five ways, in interleaved rounds (see benchkit.Rounds):
//
//   - floor: the same writes by hand in one transaction: the conditional
//     completion, both updates, the ledger row and the increment. Seven
//     round trips; it confirms nothing before the updates and keeps no
//     record, so a crash or a failed update after the commit would bill
//     nothing, ever, and it holds the job's row across the updates.
//   - today: jobguard's Finalize, then usage.Accrue: billing at most once.
//   - settle: settle's Finalize, which also writes the record with the
//     completion and confirms it in the billing transaction: billing
//     exactly once.
//   - today-counted and settle-counted: the same two with the account's
//     total kept by the ledger's counter (usage.Counter), no increment:
//     Accrue is one statement, and so is settle's billing.
//
// Each reports its round trips (settle-trips), its time, and its ratio to
// the floor's time in the same round; settle's is also taken to today's
// (settle/today): the price of exactly once over at most once.
//
//	go test ./settle -run '^$' -bench Finalize -benchtime 200x
func BenchmarkFinalize(b *testing.B) {
	ctx := context.Background()
	bd := setup(b)
	cfg, err := pgxpool.ParseConfig(bd.env.DatabaseURL)
	if err != nil {
		b.Fatal(err)
	}
	trips := &benchkit.RoundTrips{}
	cfg.ConnConfig.Tracer = trips
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	entry := usage.Entry{Account: "acct-1", Meter: "video_ms", Quantity: 1000}
	update := func(sql, videoID string, args ...any) error {
		_, err := pool.Exec(ctx, sql, append([]any{videoID}, args...)...)
		return err
	}
	// Every op of every round finalizes a job of its own.
	ids := benchJobs(b, bd, 6*b.N)
	next := 0
	job := func() (jobguard.Execution, string) {
		id := ids[next]
		next++
		return jobguard.Execution{JobID: id, Generation: 1}, "video-" + id[:8]
	}

	floor := func() error {
		exec, vid := job()
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `UPDATE jobs SET status = 'COMPLETED', updated_at = now()
WHERE id = $1 AND status IN ('QUEUED', 'PROCESSING') AND generation = $2`, exec.JobID, exec.Generation)
			if err != nil {
				return err
			}
			if tag.RowsAffected() != 1 {
				return fmt.Errorf("job %s: not completed", exec.JobID)
			}
			if _, err := tx.Exec(ctx, benchVideo, vid, int64(1000)); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, benchContent, vid); err != nil {
				return err
			}
			tag, err = tx.Exec(ctx, `INSERT INTO usage_ledger (jobs_table, job_id, meter, generation, account, quantity)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`, bd.jobs.Guard.TableKey(), exec.JobID, entry.Meter, exec.Generation, entry.Account, entry.Quantity)
			if err != nil || tag.RowsAffected() == 0 {
				return err
			}
			_, err = tx.Exec(ctx, benchBill, entry.Account, entry.Quantity)
			return err
		})
	}

	// finalize is jobguard's Finalize of the next job with both updates.
	finalize := func() (jobguard.Finalized, error) {
		exec, vid := job()
		return bd.jobs.Guard.Finalize(ctx, pool, exec, jobguard.FinalizeSpec{
			Updates: []jobguard.Update{
				{Name: "video", Run: func(ctx context.Context) error { return update(benchVideo, vid, int64(1000)) }},
				{Name: "content", Run: func(ctx context.Context) error { return update(benchContent, vid) }},
			},
			UpdateTimeout: settle.UpdateTimeoutDefault,
		})
	}
	today := func() error {
		fin, err := finalize()
		if err != nil {
			return err
		}
		exec := fin.Execution()
		acc, err := usage.Accrue(ctx, pool, fin, entry, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, benchBill, entry.Account, entry.Quantity)
			return err
		})
		if err == nil && !acc.Accrued {
			err = fmt.Errorf("job %s: not accrued", exec.JobID)
		}
		return err
	}

	run := func(sql string) settle.Handler {
		return func(ctx context.Context, _ jobguard.Execution, raw json.RawMessage) error {
			var a videoArgs
			if err := json.Unmarshal(raw, &a); err != nil {
				return err
			}
			if sql == benchVideo {
				return update(sql, a.VideoID, a.DurationMS)
			}
			return update(sql, a.VideoID)
		}
	}
	s := bd.settler(b, settle.Config{
		DB:       pool,
		Handlers: map[string]settle.Handler{"video": run(benchVideo), "content": run(benchContent)},
		Increments: map[string]settle.Increment{"video_ms": func(ctx context.Context, tx pgx.Tx, _ jobguard.Execution, e usage.Entry) error {
			_, err := tx.Exec(ctx, benchBill, e.Account, e.Quantity)
			return err
		}},
	})
	settled := func() error {
		exec, vid := job()
		args := videoArgs{VideoID: vid, DurationMS: 1000}
		res, err := s.Finalize(ctx, pool, exec, settle.Spec{
			Updates: []settle.Update{{Name: "video", Args: args}, {Name: "content", Args: args}},
			Usage:   []usage.Entry{entry},
		})
		if err == nil && !res.Settled {
			err = fmt.Errorf("job %s: not settled", exec.JobID)
		}
		return err
	}

	// The same two ways with the account's total kept by the ledger's
	// counter instead of an increment: Accrue is then one statement, and
	// so is settle's billing.
	counted, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
		"video_ms": {Table: "accounts", Key: "id", Column: "video_ms"}}})
	if err != nil {
		b.Fatal(err)
	}
	todayCounted := func() error {
		fin, err := finalize()
		if err != nil {
			return err
		}
		exec := fin.Execution()
		acc, err := counted.Accrue(ctx, pool, fin, entry, nil)
		if err == nil && !acc.Accrued {
			err = fmt.Errorf("job %s: not accrued", exec.JobID)
		}
		return err
	}
	sc := bd.settler(b, settle.Config{
		DB:         pool,
		Handlers:   map[string]settle.Handler{"video": run(benchVideo), "content": run(benchContent)},
		Ledger:     counted,
		Increments: map[string]settle.Increment{},
	})
	settledCounted := func() error {
		exec, vid := job()
		args := videoArgs{VideoID: vid, DurationMS: 1000}
		res, err := sc.Finalize(ctx, pool, exec, settle.Spec{
			Updates: []settle.Update{{Name: "video", Args: args}, {Name: "content", Args: args}},
			Usage:   []usage.Entry{entry},
		})
		if err == nil && !res.Settled {
			err = fmt.Errorf("job %s: not settled", exec.JobID)
		}
		return err
	}

	benchkit.Rounds(b, trips, 1, "finalize",
		benchkit.Op{Name: "floor", Run: floor},
		benchkit.Op{Name: "settle", Run: settled},
		benchkit.Op{Name: "today", Run: today},
		benchkit.Op{Name: "settle-vs", Run: settled, Versus: "today"},
		benchkit.Op{Name: "today-counted", Run: todayCounted},
		benchkit.Op{Name: "settle-counted", Run: settledCounted, Versus: "today-counted"},
	)
}
