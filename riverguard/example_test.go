package riverguard_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/riverguard"
)

// ChapterArgs are a River job's args: the id of its row in the jobs table
// under the key riverguard reads (and riversource too).
type ChapterArgs struct {
	JobID string `json:"job_id"`
}

func (ChapterArgs) Kind() string { return "chapter" }

// ChapterWorker saves a chapter under the execution the middleware
// started: the completion first, then the chapter, in one transaction.
type ChapterWorker struct {
	river.WorkerDefaults[ChapterArgs]
	Guard *jobguard.Guard
	Pool  *pgxpool.Pool
}

func (w *ChapterWorker) Work(ctx context.Context, job *river.Job[ChapterArgs]) error {
	// The slow model call would run here, under ctx.
	exec, _ := riverguard.Execution(ctx)
	return w.Guard.CompleteTx(ctx, w.Pool, exec, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO chapters (job_id, title) VALUES ($1, 'Week 1')`, exec.JobID)
		return err
	})
}

// A River client whose chapter jobs run under the guards: a fresh job
// completes, and the River job of a row that was reclaimed is cancelled at
// start, without reaching the worker.
func Example() {
	tb, done := testenv.ExampleTB()
	defer done()
	env := testenv.New(tb)
	migrateRiver(tb, env)
	ctx := context.Background()
	pool := env.Pool
	// The jobs table and the reclaim markers' table: River and jobguard
	// need nothing but Postgres.
	if _, err := pool.Exec(ctx, jobguard.Migration+marker.Migration+`CREATE TABLE chapters (job_id uuid, title text)`); err != nil {
		panic(err)
	}
	guard, err := jobguard.New(ctx, pool, jobguard.DefaultTable())
	if err != nil {
		panic(err)
	}
	starts, err := jobguard.NewStartGuard(guard, nil, jobguard.StartGuardConfig{})
	if err != nil {
		panic(err)
	}

	// The middleware, on the whole client, for the kinds with a row.
	guarded, err := riverguard.New(riverguard.Config{
		StartGuard: starts, DB: pool, Kinds: []string{"chapter"},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &ChapterWorker{Guard: guard, Pool: pool})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:     env.Schema,
		Queues:     map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
		Workers:    workers,
		Middleware: []rivertype.Middleware{guarded},
		JobTimeout: -1, // the model call takes as long as it takes; the reclaimer bounds it
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	events, unsubscribe := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobCancelled)
	defer unsubscribe()
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer client.Stop(ctx)

	// Queue a job: its row, then the River job that names it.
	run := func(jobID string) {
		if _, err := client.Insert(ctx, ChapterArgs{JobID: jobID}, nil); err != nil {
			panic(err)
		}
		ev := <-events
		var status string
		var generation, chapters int
		if err := pool.QueryRow(ctx, `SELECT status, generation, (SELECT count(*) FROM chapters WHERE job_id = $1)
			FROM jobs WHERE id = $1`, jobID).Scan(&status, &generation, &chapters); err != nil {
			panic(err)
		}
		fmt.Printf("River job %s; row %s at generation %d; %d chapter(s)\n", ev.Job.State, status, generation, chapters)
	}
	var fresh, reclaimed string
	if err := pool.QueryRow(ctx, `INSERT INTO jobs (type) VALUES ('chapter') RETURNING id::text`).Scan(&fresh); err != nil {
		panic(err)
	}
	run(fresh)
	// A row the reclaimer failed while its first attempt hung.
	if err := pool.QueryRow(ctx, `INSERT INTO jobs (type, status, generation, failure_reason)
		VALUES ('chapter', 'FAILED', 1, $1) RETURNING id::text`, jobguard.ReclaimedReasonDefault).Scan(&reclaimed); err != nil {
		panic(err)
	}
	run(reclaimed)
	// Output:
	// River job completed; row COMPLETED at generation 1; 1 chapter(s)
	// River job cancelled; row FAILED at generation 1; 0 chapter(s)
}

func ExampleNew() {
	_, err := riverguard.New(riverguard.Config{})
	fmt.Println(err)
	// Output: riverguard: new: StartGuard is nil
}

func ExampleExecution() {
	// Outside a job the middleware started, there is none.
	_, ok := riverguard.Execution(context.Background())
	fmt.Println(ok)
	// Output: false
}
