package perf

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/heartbeat"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// counter counts round trips: every query and every batch sent to
// PostgreSQL (BEGIN and COMMIT are queries too), every command and every
// pipeline sent to Redis. It is the pool's tracer and the client's hook.
type counter struct {
	pg, redis atomic.Int64
}

var (
	_ pgx.QueryTracer = (*counter)(nil)
	_ pgx.BatchTracer = (*counter)(nil)
	_ redis.Hook      = (*counter)(nil)
)

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.pg.Add(1)
	return ctx
}

func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *counter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.pg.Add(1)
	return ctx
}

func (c *counter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (c *counter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.redis.Add(1)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.redis.Add(1)
		return next(ctx, cmds)
	}
}

// total is the round trips counted so far, to both servers.
func (c *counter) total() int64 { return c.pg.Load() + c.redis.Load() }

// A lifecycle is a job's whole life from a worker's side: start it, write
// one heartbeat, complete it with one child row, run one metadata update,
// bill one usage entry (its ledger row and its account's counter). The
// plain one is its floor: the same writes, one unconditional statement
// each (the ledger row and the counter in one), none of the guards. Each
// job bills an account of its own, so that workers do not queue on one
// counter's row lock: the figure is the guards', not the lock's.
type lifecycle func(ctx context.Context, id string) error

// world is one benchmark's schema, its traced connections, and the two
// lifecycles over them.
type world struct {
	env   *testenv.Env
	pool  *pgxpool.Pool
	rdb   *redis.Client
	count *counter
	plain lifecycle
	// guarded goes through the public API: StartGuard.Start,
	// Heartbeat.Beat, Guard.Finalize (Complete inserts the child row, one
	// Update the metadata), Ledger.Accrue, whose ledger counts the meter
	// into the account's row (usage.Counter).
	guarded lifecycle
	// guardedInc is guarded with the account's counter written by an
	// increment func instead, in Accrue's transaction.
	guardedInc lifecycle
	// settled is guarded with settle's Finalize in place of Finalize and
	// Accrue: the same work, made durable by a record that a sweep
	// finishes should the worker die. Its ledger counts the meter.
	settled lifecycle
	// settledInc is settled with the counter written by a
	// settle.Increment instead, in the billing transaction.
	settledInc lifecycle
}

// newWorld builds a world whose pool and Redis client hold conns
// connections and whose guard reads its markers from markers.
func newWorld(tb testing.TB, markers jobguard.MarkerBackend, conns int) *world {
	tb.Helper()
	env := testenv.New(tb)
	jobs := fixture.Create(tb, env, fixture.Default)
	env.Exec(usage.Migration + settle.Migration + `
CREATE TABLE children (job_id uuid NOT NULL, n int NOT NULL);
CREATE TABLE videos (job_id uuid PRIMARY KEY, ready boolean NOT NULL DEFAULT false);
CREATE TABLE accounts (id text PRIMARY KEY, seconds bigint NOT NULL DEFAULT 0)`)
	w := &world{env: env, count: &counter{}}

	cfg, err := pgxpool.ParseConfig(env.DatabaseURL)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = int32(conns), int32(conns)
	cfg.ConnConfig.Tracer = w.count
	if w.pool, err = pgxpool.NewWithConfig(context.Background(), cfg); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(w.pool.Close)
	opt, err := redis.ParseURL(env.RedisURL)
	if err != nil {
		tb.Fatal(err)
	}
	opt.PoolSize, opt.MinIdleConns = conns, conns
	w.rdb = redis.NewClient(opt)
	w.rdb.AddHook(w.count)
	tb.Cleanup(func() { _ = w.rdb.Close() })

	guard := jobs.GuardWith(tb, jobguard.Shared{Markers: markers})
	sg, err := jobguard.NewStartGuard(guard, w.rdb, jobguard.StartGuardConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	hb := heartbeat.New(guard, heartbeat.Config{})
	pool := w.pool

	counted, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
		"seconds": {Table: "accounts", Key: "id", Column: "seconds"}}})
	if err != nil {
		tb.Fatal(err)
	}
	accrue := func(ctx context.Context, fin jobguard.Finalized, account string) (usage.Accrual, error) {
		return counted.Accrue(ctx, pool, fin, usage.Entry{Account: account, Meter: "seconds", Quantity: 90}, nil)
	}
	accrueInc := func(ctx context.Context, fin jobguard.Finalized, account string) (usage.Accrual, error) {
		return usage.Accrue(ctx, pool, fin, usage.Entry{Account: account, Meter: "seconds", Quantity: 90},
			func(ctx context.Context, tx pgx.Tx) error { return bill(ctx, tx, account, 90) })
	}
	// worked starts the job and writes its heartbeat, then finishes it
	// with finish: the part every guarded life shares.
	worked := func(finish func(ctx context.Context, exec jobguard.Execution) error) lifecycle {
		return func(ctx context.Context, id string) error {
			exec, err := sg.Start(ctx, pool, id)
			if err != nil {
				return err
			}
			defer hb.Forget(exec.JobID)
			if res, err := hb.Beat(ctx, pool, exec, heartbeat.Progress(50)); res != heartbeat.Written {
				return fmt.Errorf("beat: %v %w", res, err)
			}
			return finish(ctx, exec)
		}
	}
	guarded := func(accrue func(ctx context.Context, fin jobguard.Finalized, account string) (usage.Accrual, error)) lifecycle {
		return worked(func(ctx context.Context, exec jobguard.Execution) error {
			fin, err := guard.Finalize(ctx, pool, exec, jobguard.FinalizeSpec{
				Complete: func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, `INSERT INTO children (job_id, n) VALUES ($1, 1)`, exec.JobID)
					return err
				},
				Updates: []jobguard.Update{{Name: "video", Run: func(ctx context.Context) error {
					_, err := pool.Exec(ctx, `UPDATE videos SET ready = true WHERE job_id = $1`, exec.JobID)
					return err
				}}},
			})
			if err != nil {
				return err
			}
			acc, err := accrue(ctx, fin, exec.JobID)
			if err == nil && !acc.Accrued {
				err = fmt.Errorf("job %s was not billed", exec.JobID)
			}
			return err
		})
	}
	w.guarded, w.guardedInc = guarded(accrue), guarded(accrueInc)

	video := func(ctx context.Context, exec jobguard.Execution, _ json.RawMessage) error {
		_, err := pool.Exec(ctx, `UPDATE videos SET ready = true WHERE job_id = $1`, exec.JobID)
		return err
	}
	settler := func(cfg settle.Config) *settle.Settler {
		cfg.Guard, cfg.DB = guard, pool
		cfg.Handlers = map[string]settle.Handler{"video": video}
		st, err := settle.New(context.Background(), cfg)
		if err != nil {
			tb.Fatal(err)
		}
		return st
	}
	settled := func(st *settle.Settler) lifecycle {
		return worked(func(ctx context.Context, exec jobguard.Execution) error {
			res, err := st.Finalize(ctx, pool, exec, settle.Spec{
				Complete: func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, `INSERT INTO children (job_id, n) VALUES ($1, 1)`, exec.JobID)
					return err
				},
				Updates: []settle.Update{{Name: "video"}},
				Usage:   []usage.Entry{{Account: exec.JobID, Meter: "seconds", Quantity: 90}},
			})
			if err == nil && !res.Settled {
				err = fmt.Errorf("job %s was not settled", exec.JobID)
			}
			return err
		})
	}
	w.settled = settled(settler(settle.Config{Ledger: counted}))
	w.settledInc = settled(settler(settle.Config{
		Increments: map[string]settle.Increment{"seconds": func(ctx context.Context, tx pgx.Tx, _ jobguard.Execution, e usage.Entry) error {
			return bill(ctx, tx, e.Account, e.Quantity)
		}},
	}))

	key := guard.TableKey()
	w.plain = func(ctx context.Context, id string) error {
		var gen int64
		if err := pool.QueryRow(ctx, `UPDATE jobs SET status = 'PROCESSING', generation = generation + 1,
started_at = now(), updated_at = now() WHERE id = $1 RETURNING generation`, id).Scan(&gen); err != nil {
			return err
		}
		if _, err := pool.Exec(ctx, `UPDATE jobs SET updated_at = now(), progress = 50 WHERE id = $1`, id); err != nil {
			return err
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `UPDATE jobs SET status = 'COMPLETED', updated_at = now() WHERE id = $1`, id); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO children (job_id, n) VALUES ($1, 1)`, id)
			return err
		})
		if err != nil {
			return err
		}
		if _, err := pool.Exec(ctx, `UPDATE videos SET ready = true WHERE job_id = $1`, id); err != nil {
			return err
		}
		_, err = pool.Exec(ctx, `WITH l AS (INSERT INTO usage_ledger (jobs_table, job_id, meter, generation, account, quantity)
VALUES ($1, $2, 'seconds', $3, $2, 90))
INSERT INTO accounts (id, seconds) VALUES ($2, 90) ON CONFLICT (id) DO UPDATE SET seconds = accounts.seconds + 90`, key, id, gen)
		return err
	}
	return w
}

// bill adds quantity to account's counter: the increment a biller runs
// once per ledger row.
func bill(ctx context.Context, tx pgx.Tx, account string, quantity int64) error {
	_, err := tx.Exec(ctx, `INSERT INTO accounts (id, seconds) VALUES ($1, $2)
ON CONFLICT (id) DO UPDATE SET seconds = accounts.seconds + excluded.seconds`, account, quantity)
	return err
}

// queued inserts n QUEUED jobs, each with its video row, and returns their
// ids. It goes around the counted pool.
func (w *world) queued(tb testing.TB, n int) []string {
	tb.Helper()
	rows, err := w.env.Pool.Query(context.Background(), `
WITH j AS (INSERT INTO jobs (type, status, generation) SELECT 'video', 'QUEUED', 1 FROM generate_series(1, $1) RETURNING id),
v AS (INSERT INTO videos (job_id) SELECT id FROM j)
SELECT id::text FROM j`, n)
	if err != nil {
		tb.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		tb.Fatal(err)
	}
	return ids
}

// roundTrips runs life over n fresh jobs, after one to warm the
// connection's statement cache, and returns the round trips per job to
// PostgreSQL and to Redis.
func (w *world) roundTrips(tb testing.TB, life lifecycle, n int) (pg, rdb float64) {
	tb.Helper()
	ctx := context.Background()
	ids := w.queued(tb, n+1)
	if err := life(ctx, ids[0]); err != nil {
		tb.Fatal(err)
	}
	pg0, r0 := w.count.pg.Load(), w.count.redis.Load()
	for _, id := range ids[1:] {
		if err := life(ctx, id); err != nil {
			tb.Fatal(err)
		}
	}
	return float64(w.count.pg.Load()-pg0) / float64(n), float64(w.count.redis.Load()-r0) / float64(n)
}
