package jobguard_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/lease"
)

// Each benchmark pair runs the same transaction shape, BEGIN; update;
// insert one child row; COMMIT, once with a plain UPDATE and once through
// the guard, so the overhead reads as a ratio:
//
//	go test -run '^$' -bench . -count 6 ./jobguard/ | benchstat -col /op -

type benchEnv struct {
	env  *testenv.Env
	jobs *fixture.Jobs
	sg   *jobguard.StartGuard
}

func setupBench(b *testing.B) benchEnv {
	b.Helper()
	env := testenv.New(b)
	jobs := fixture.Create(b, env, fixture.Default)
	env.Exec(`CREATE TABLE children (job_id uuid NOT NULL, n int NOT NULL)`)
	sg, err := jobguard.NewStartGuard(jobs.Guard, env.Redis, jobguard.StartGuardConfig{})
	if err != nil {
		b.Fatal(err)
	}
	return benchEnv{env, jobs, sg}
}

// insertJobs creates n jobs with status and generation 1 and returns their ids.
func (e benchEnv) insertJobs(b *testing.B, n int, status string) []string {
	b.Helper()
	rows, err := e.env.Pool.Query(context.Background(), `
INSERT INTO jobs (type, status, generation) SELECT 'bench', $2, 1 FROM generate_series(1, $1)
RETURNING id::text`, n, status)
	if err != nil {
		b.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		b.Fatal(err)
	}
	return ids
}

func (e benchEnv) inTx(b *testing.B, id string, update func(ctx context.Context, tx pgx.Tx) error) {
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, e.env.Pool, func(tx pgx.Tx) error {
		if err := update(ctx, tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO children (job_id, n) VALUES ($1, 1)`, id)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
}

func BenchmarkComplete(b *testing.B) {
	b.Run("op=plain", func(b *testing.B) {
		e := setupBench(b)
		ids := e.insertJobs(b, b.N, "PROCESSING")
		b.ResetTimer()
		for i := range b.N {
			e.inTx(b, ids[i], func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `UPDATE jobs SET status = 'COMPLETED', updated_at = now() WHERE id = $1`, ids[i])
				return err
			})
		}
	})
	b.Run("op=guarded", func(b *testing.B) {
		e := setupBench(b)
		ids := e.insertJobs(b, b.N, "PROCESSING")
		b.ResetTimer()
		for i := range b.N {
			e.inTx(b, ids[i], func(ctx context.Context, tx pgx.Tx) error {
				return e.jobs.Guard.CompleteIfActive(ctx, tx, jobguard.Execution{JobID: ids[i], Generation: 1})
			})
		}
	})
}

// BenchmarkStart runs the plain UPDATE floor beside Start over each marker
// store: markers=redis reads the marker with a GET before the statement,
// markers=postgres reads it inside the statement.
func BenchmarkStart(b *testing.B) {
	b.Run("op=plain", func(b *testing.B) {
		e := setupBench(b)
		ids := e.insertJobs(b, b.N, "QUEUED")
		b.ResetTimer()
		for i := range b.N {
			e.inTx(b, ids[i], func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `UPDATE jobs SET status = 'PROCESSING', updated_at = now() WHERE id = $1`, ids[i])
				return err
			})
		}
	})
	for _, markers := range []jobguard.MarkerBackend{jobguard.MarkersRedis, jobguard.MarkersPostgres} {
		b.Run("op=guarded/markers="+markers.String(), func(b *testing.B) {
			e := setupBench(b)
			sg, err := jobguard.NewStartGuard(e.jobs.GuardWith(b, jobguard.Shared{Markers: markers}), e.env.Redis, jobguard.StartGuardConfig{})
			if err != nil {
				b.Fatal(err)
			}
			ids := e.insertJobs(b, b.N, "QUEUED")
			b.ResetTimer()
			for i := range b.N {
				e.inTx(b, ids[i], func(ctx context.Context, tx pgx.Tx) error {
					_, err := sg.Start(ctx, tx, ids[i])
					return err
				})
			}
		})
	}
	// The owner travels in Start's own statement: one more parameter,
	// no round trip of its own.
	b.Run("op=guarded-owner/markers=postgres", func(b *testing.B) {
		e := setupBench(b)
		e.env.Exec(lease.Migration)
		l, err := lease.New(e.env.Pool, lease.Config{})
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Stop(context.Background()) })
		sg, err := jobguard.NewStartGuard(e.jobs.GuardWith(b, jobguard.Shared{Markers: jobguard.MarkersPostgres}), nil,
			jobguard.StartGuardConfig{Owner: l})
		if err != nil {
			b.Fatal(err)
		}
		ids := e.insertJobs(b, b.N, "QUEUED")
		b.ResetTimer()
		for i := range b.N {
			e.inTx(b, ids[i], func(ctx context.Context, tx pgx.Tx) error {
				_, err := sg.Start(ctx, tx, ids[i])
				return err
			})
		}
	})
}

// BenchmarkFinalize is Finalize with no re-check and no update beside the
// transaction it stands for: BEGIN; complete; COMMIT, with a plain UPDATE.
// The two differ by Finalize's own work (the guarded statement, the checks
// before it), not by the caller's updates.
func BenchmarkFinalize(b *testing.B) {
	b.Run("op=plain", func(b *testing.B) {
		e := setupBench(b)
		ids := e.insertJobs(b, b.N, "PROCESSING")
		ctx := context.Background()
		b.ResetTimer()
		for i := range b.N {
			err := pgx.BeginFunc(ctx, e.env.Pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `UPDATE jobs SET status = 'COMPLETED', updated_at = now() WHERE id = $1`, ids[i])
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("op=guarded", func(b *testing.B) {
		e := setupBench(b)
		ids := e.insertJobs(b, b.N, "PROCESSING")
		ctx := context.Background()
		b.ResetTimer()
		for i := range b.N {
			fin, err := e.jobs.Guard.Finalize(ctx, e.env.Pool, jobguard.Execution{JobID: ids[i], Generation: 1}, jobguard.FinalizeSpec{})
			if err != nil || !fin.Confirmed() {
				b.Fatalf("finalize: %v (confirmed %v)", err, fin.Confirmed())
			}
		}
	})
}
