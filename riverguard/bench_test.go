package riverguard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river/rivertype"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/riverguard"
	"github.com/jobguard/jobguard/watch"
)

// BenchmarkWork runs one delivery of a chapter job, from the River job's
// args to the committed save, beside the same work written by hand:
//
//   - by-hand: what a careful engineer writes without the library: read
//     the reclaim marker from Redis, start the row with one conditional
//     UPDATE that bumps the generation, then save in one transaction whose
//     first write is the conditional completion at that generation,
//     checking the rows it affected, then the product row.
//   - riverguard: Middleware.Work around a worker whose save is one
//     CompleteTx under riverguard.Execution.
//   - riverguard+watch: the same, with a Watcher watching the execution
//     while the worker runs.
//
// River's own fetching and completing are outside both. Compare with
//
//	go test -run '^$' -bench BenchmarkWork -count 6 ./riverguard/ | benchstat -col /op -
func BenchmarkWork(b *testing.B) {
	b.Run("op=by-hand", func(b *testing.B) {
		e := setupBench(b)
		ctx := context.Background()
		b.ResetTimer()
		for i := range b.N {
			id := e.ids[i]
			if err := e.env.Redis.Get(ctx, e.starts.Markers().Key(id)).Err(); !errors.Is(err, redis.Nil) {
				b.Fatalf("marker: %v", err)
			}
			var gen int64
			if err := e.env.Pool.QueryRow(ctx, `UPDATE jobs SET status = 'PROCESSING', updated_at = now(),
				generation = generation + 1, started_at = now()
				WHERE id = $1 AND status IN ('QUEUED', 'PROCESSING')
				AND (failure_reason IS NULL OR NOT starts_with(failure_reason, $2)) RETURNING generation`,
				id, jobguard.ReclaimedReasonDefault).Scan(&gen); err != nil {
				b.Fatal(err)
			}
			err := pgx.BeginFunc(ctx, e.env.Pool, func(tx pgx.Tx) error {
				tag, err := tx.Exec(ctx, `UPDATE jobs SET status = 'COMPLETED', updated_at = now(), progress = 100
					WHERE id = $1 AND status IN ('QUEUED', 'PROCESSING') AND generation = $2`, id, gen)
				if err != nil {
					return err
				}
				if tag.RowsAffected() != 1 {
					return fmt.Errorf("job %s: not completed", id)
				}
				_, err = tx.Exec(ctx, `INSERT INTO chapters (job_id, generation) VALUES ($1, $2)`, id, gen)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("op=riverguard", func(b *testing.B) {
		e := setupBench(b)
		e.work(b, riverguard.Config{})
	})
	b.Run("op=riverguard+watch", func(b *testing.B) {
		e := setupBench(b)
		w, err := watch.New(watch.Config{Guard: e.jobs.Guard, DB: e.env.Pool, Transport: watch.Transport{Redis: e.env.Redis}})
		if err != nil {
			b.Fatal(err)
		}
		e.work(b, riverguard.Config{Watcher: w})
	})
}

// benchEnv is b.N queued rows and their River jobs' rows.
type benchEnv struct {
	env    *testenv.Env
	jobs   *fixture.Jobs
	starts *jobguard.StartGuard
	ids    []string
	rows   []*rivertype.JobRow
}

func setupBench(b *testing.B) benchEnv {
	b.Helper()
	env := testenv.New(b)
	jobs := fixture.Create(b, env, fixture.Default)
	env.Exec(`CREATE TABLE chapters (job_id text NOT NULL, generation bigint NOT NULL)`)
	starts, err := jobguard.NewStartGuard(jobs.Guard, env.Redis, jobguard.StartGuardConfig{})
	if err != nil {
		b.Fatal(err)
	}
	rows, err := env.Pool.Query(context.Background(), `INSERT INTO jobs (type) SELECT 'chapter' FROM generate_series(1, $1) RETURNING id::text`, b.N)
	if err != nil {
		b.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		b.Fatal(err)
	}
	e := benchEnv{env: env, jobs: jobs, starts: starts, ids: ids}
	for i, id := range ids {
		args, err := json.Marshal(map[string]any{"job_id": id, "weeks": 2})
		if err != nil {
			b.Fatal(err)
		}
		e.rows = append(e.rows, &rivertype.JobRow{ID: int64(i + 1), Kind: "chapter", Attempt: 1, EncodedArgs: args})
	}
	return e
}

// work runs every River job through a middleware built from cfg.
func (e benchEnv) work(b *testing.B, cfg riverguard.Config) {
	cfg.StartGuard, cfg.DB, cfg.Logger = e.starts, e.env.Pool, slog.New(slog.DiscardHandler)
	mw, err := riverguard.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	save := func(ctx context.Context) error {
		exec, _ := riverguard.Execution(ctx)
		return e.jobs.Guard.CompleteTx(ctx, e.env.Pool, exec, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO chapters (job_id, generation) VALUES ($1, $2)`, exec.JobID, exec.Generation)
			return err
		})
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		if err := mw.Work(ctx, e.rows[i], save); err != nil {
			b.Fatal(err)
		}
	}
}
