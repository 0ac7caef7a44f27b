package asynqguard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/asynqguard"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

// BenchmarkDelivery is one delivery of a chapter task, from its payload to
// the committed save (the completion and one chapter row), called the way
// asynq's server calls a handler, without the server:
//
//   - op=plain is what a careful engineer writes by hand: decode the
//     payload, start the job with one conditional UPDATE that bumps its
//     generation, then a save transaction whose first statement completes
//     the job only at that generation, and the chapter row.
//   - op=guarded is the middleware (the payload, StartGuard.Start with its
//     Redis marker lookup, the execution in the context) around a handler
//     that saves with CompleteTx.
//
// The difference is the guard's own work: the marker lookup (one Redis
// GET), the start's conditions on the failure reason and the marker's
// generation, the id parsed before any SQL is sent, the context value, and
// CompleteTx's check that its connection holds no transaction. Run it with:
//
//	go test -run '^$' -bench Delivery -count 6 ./asynqguard/ | benchstat -col /op -
func BenchmarkDelivery(b *testing.B) {
	b.Run("op=plain", func(b *testing.B) {
		e := setupBench(b)
		pool := e.env.Pool
		e.run(b, asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			var p struct {
				JobID string `json:"job_id"`
			}
			if err := json.Unmarshal(t.Payload(), &p); err != nil {
				return err
			}
			var gen int64
			err := pool.QueryRow(ctx, `UPDATE jobs SET status = 'PROCESSING', generation = generation + 1,
				started_at = now(), updated_at = now()
				WHERE id = $1 AND status IN ('QUEUED', 'PROCESSING') RETURNING generation`, p.JobID).Scan(&gen)
			if err != nil {
				return err
			}
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				tag, err := tx.Exec(ctx, `UPDATE jobs SET status = 'COMPLETED', updated_at = now()
					WHERE id = $1 AND status IN ('QUEUED', 'PROCESSING') AND generation = $2`, p.JobID, gen)
				if err != nil {
					return err
				}
				if tag.RowsAffected() == 0 {
					return errors.New("job is not active")
				}
				_, err = tx.Exec(ctx, `INSERT INTO chapters (job_id, n) VALUES ($1, 1)`, p.JobID)
				return err
			})
		}))
	})
	b.Run("op=guarded", func(b *testing.B) {
		e := setupBench(b)
		pool, guard := e.env.Pool, e.jobs.Guard
		starts, err := jobguard.NewStartGuard(guard, e.env.Redis, jobguard.StartGuardConfig{})
		if err != nil {
			b.Fatal(err)
		}
		mw, err := asynqguard.New(asynqguard.Config{StartGuard: starts, DB: pool})
		if err != nil {
			b.Fatal(err)
		}
		e.run(b, mw(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			exec, _ := asynqguard.Execution(ctx)
			return guard.CompleteTx(ctx, pool, exec, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO chapters (job_id, n) VALUES ($1, 1)`, exec.JobID)
				return err
			})
		})))
	})
}

type benchEnv struct {
	env  *testenv.Env
	jobs *fixture.Jobs
}

// setupBench creates the default jobs table and the chapters table in a
// schema of the benchmark's own.
func setupBench(b *testing.B) benchEnv {
	b.Helper()
	env := testenv.New(b)
	jobs := fixture.Create(b, env, fixture.Default)
	env.Exec(`CREATE TABLE chapters (job_id uuid NOT NULL, n int NOT NULL)`)
	return benchEnv{env: env, jobs: jobs}
}

// run delivers a task for each of b.N new QUEUED jobs through h, and fails
// the benchmark on the first error.
func (e benchEnv) run(b *testing.B, h asynq.Handler) {
	b.Helper()
	ctx := context.Background()
	rows, err := e.env.Pool.Query(ctx, `INSERT INTO jobs (type) SELECT 'chapter' FROM generate_series(1, $1) RETURNING id::text`, b.N)
	if err != nil {
		b.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		b.Fatal(err)
	}
	tasks := make([]*asynq.Task, len(ids))
	for i, id := range ids {
		tasks[i] = asynq.NewTask(taskType, fmt.Appendf(nil, `{"job_id": %q}`, id))
	}
	b.ResetTimer()
	for i := range b.N {
		if err := h.ProcessTask(ctx, tasks[i]); err != nil {
			b.Fatal(err)
		}
	}
}
