package settle_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
// entry: op=today is jobguard's Finalize then usage.Accrue, billing at
// most once; op=settle is settle's Finalize, which also writes the record
// with the completion, records each update's success and confirms the
// record in the billing transaction. The ratio is the price of exactly
// once.
func BenchmarkFinalize(b *testing.B) {
	ctx := context.Background()
	entry := func(id string) usage.Entry { return usage.Entry{Account: "acct-1", Meter: "video_ms", Quantity: 1000} }
	update := func(pool *pgxpool.Pool, sql, videoID string, args ...any) error {
		_, err := pool.Exec(ctx, sql, append([]any{videoID}, args...)...)
		return err
	}

	b.Run("op=today", func(b *testing.B) {
		bd := setup(b)
		pool := bd.env.Pool
		ids := benchJobs(b, bd, b.N)
		b.ResetTimer()
		for i := range b.N {
			vid := "video-" + ids[i][:8]
			exec := jobguard.Execution{JobID: ids[i], Generation: 1}
			fin, err := bd.jobs.Guard.Finalize(ctx, pool, exec, jobguard.FinalizeSpec{
				Updates: []jobguard.Update{
					{Name: "video", Run: func(ctx context.Context) error { return update(pool, benchVideo, vid, int64(1000)) }},
					{Name: "content", Run: func(ctx context.Context) error { return update(pool, benchContent, vid) }},
				},
				UpdateTimeout: settle.UpdateTimeoutDefault,
			})
			if err != nil {
				b.Fatal(err)
			}
			e := entry(ids[i])
			acc, err := usage.Accrue(ctx, pool, fin, e, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, benchBill, e.Account, e.Quantity)
				return err
			})
			if err != nil || !acc.Accrued {
				b.Fatalf("accrue: %v", err)
			}
		}
	})

	b.Run("op=settle", func(b *testing.B) {
		bd := setup(b)
		pool := bd.env.Pool
		run := func(sql string) settle.Handler {
			return func(ctx context.Context, _ jobguard.Execution, raw json.RawMessage) error {
				var a videoArgs
				if err := json.Unmarshal(raw, &a); err != nil {
					return err
				}
				if sql == benchVideo {
					return update(pool, sql, a.VideoID, a.DurationMS)
				}
				return update(pool, sql, a.VideoID)
			}
		}
		s := bd.settler(b, settle.Config{
			Handlers: map[string]settle.Handler{"video": run(benchVideo), "content": run(benchContent)},
			Increments: map[string]settle.Increment{"video_ms": func(ctx context.Context, tx pgx.Tx, _ jobguard.Execution, e usage.Entry) error {
				_, err := tx.Exec(ctx, benchBill, e.Account, e.Quantity)
				return err
			}},
		})
		ids := benchJobs(b, bd, b.N)
		b.ResetTimer()
		for i := range b.N {
			args := videoArgs{VideoID: "video-" + ids[i][:8], DurationMS: 1000}
			res, err := s.Finalize(ctx, pool, jobguard.Execution{JobID: ids[i], Generation: 1}, settle.Spec{
				Updates: []settle.Update{{Name: "video", Args: args}, {Name: "content", Args: args}},
				Usage:   []usage.Entry{entry(ids[i])},
			})
			if err != nil || !res.Settled {
				b.Fatalf("finalize: %v", err)
			}
		}
	})
}
