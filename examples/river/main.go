// Command river runs the "add weeks to a course" processor as a River
// worker. It applies River's own migrations, queues a chapter job both in
// the jobs table and in River (whose args carry the row's id), and lets a
// River client work it under riverguard's middleware, which starts the row,
// watches the execution, and has River cancel, not retry, a job the guards
// refused (reclaimed at start, or lost while it ran).
//
//	go run ./examples/river -course course-1 -weeks 2
//
// With -reclaim, a reclaimer in the same process watches the River queue
// through reclaim/riversource (River's running jobs and their attempted_at).
// Make the model call hang past the job type's limit to see it reclaimed,
// the River job cancelled, and, with -redeliver, River's redelivery of the
// same job refused by the start guard:
//
//	go run ./examples/river -hang 3s -limit 1s -no-progress 1s -reclaim -redeliver
//
// The command wires the library where it can be read: runWorker connects
// (flow.Connect: the pool, Redis, the migrations) and applies River's
// migrations, wire builds the guard over the jobs table, the start guard,
// the watcher, the middleware and, with -reclaim, the reclaimer, and the
// River worker runs the processor, examples/internal/flow/chapter.go. See
// README.md for how River's rescuer and jobguard's reclaimer divide the work.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/jobguard/jobguard/examples/internal/flow"
	"github.com/jobguard/jobguard/examples/internal/sim"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/reclaim/riversource"
	"github.com/jobguard/jobguard/riverguard"
	"github.com/jobguard/jobguard/watch"
)

// QueueDefault is the River queue the example's chapter jobs go to.
const QueueDefault = "chapters"

// ChapterArgs are the args of a chapter job in River.
type ChapterArgs struct {
	// JobID is the id of the job's row in the jobs table. The middleware
	// and the reclaimer's River source read it from the args by this key
	// (riversource.RowIDKeyDefault).
	JobID string `json:"job_id"`
}

// Kind is the River job kind, which is also the jobguard job type that
// selects the runtime limit and the parent rule.
func (ChapterArgs) Kind() string { return flow.TypeChapter }

// ChapterWorker runs the chapter processor for River.
type ChapterWorker struct {
	river.WorkerDefaults[ChapterArgs]
	// Chapters is the processor.
	Chapters *flow.Chapters
	// Log receives a line for every job done (the middleware logs refusals).
	Log *slog.Logger
}

// Work runs one delivery under the execution the middleware started. Its
// error goes back through the middleware, which has River cancel a refusal
// (a save refused, a model call the reclaim cancelled) and retry the rest.
func (w *ChapterWorker) Work(ctx context.Context, job *river.Job[ChapterArgs]) error {
	exec, ok := riverguard.Execution(ctx)
	if !ok { // a client without the middleware: no retry would help
		return river.JobCancel(errors.New("chapter: riverguard's middleware is not installed"))
	}
	res, err := w.Chapters.ProcessStarted(ctx, exec)
	if errors.Is(err, flow.ErrGaveUp) {
		return river.JobCancel(err) // the processor failed the job: a retry would be refused
	}
	if err != nil {
		return err
	}
	w.Log.InfoContext(ctx, "worker: job done", slog.String("job_id", exec.JobID),
		slog.Int64("generation", exec.Generation), slog.Int("weeks", res.Weeks))
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the command's own flags.
type options struct {
	course      string
	weeks       int
	latency     time.Duration
	hang        time.Duration
	queue       string
	redeliver   bool
	jobTimeout  time.Duration
	rescueAfter time.Duration
	wait        time.Duration
}

// run returns the exit code: 0 when the job completed or was refused by a
// guard (both are outcomes this example shows), 1 on any other error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cfg flow.Config
	var beside flow.Beside
	var o options
	fs := flag.NewFlagSet("river", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.Flags(fs)
	beside.Flags(fs)
	fs.StringVar(&o.course, "course", "course-1", "course to add weeks to (created if missing)")
	fs.IntVar(&o.weeks, "weeks", 2, "weeks to add")
	fs.DurationVar(&o.latency, "latency", 500*time.Millisecond, "how long the model call takes")
	fs.DurationVar(&o.hang, "hang", 0, "how long the model call hangs before it starts answering")
	fs.StringVar(&o.queue, "queue", QueueDefault, "River queue of the chapter jobs")
	fs.BoolVar(&o.redeliver, "redeliver", false, "after a refusal, have River deliver the same job again (JobRetry), as a rescue would")
	fs.DurationVar(&o.jobTimeout, "river-job-timeout", time.Hour, "River's JobTimeout: the worker's context is cancelled after it")
	fs.DurationVar(&o.rescueAfter, "river-rescue-after", 2*time.Hour, "River's RescueStuckJobsAfter: a job still running after it is re-queued by River's rescuer")
	fs.DurationVar(&o.wait, "wait", time.Minute, "how long to wait for River to work the job")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	stderr = &lockedWriter{w: stderr} // two loggers share it
	log := slog.New(slog.NewTextHandler(stderr, nil))
	// River logs its routine work at info; its warnings and errors are enough here.
	riverLog := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := runWorker(ctx, cfg, beside, o, log, riverLog, stdout); err != nil {
		fmt.Fprintf(stderr, "river: %v\n", err)
		return 1
	}
	return 0
}

func runWorker(ctx context.Context, cfg flow.Config, beside flow.Beside, o options, log, riverLog *slog.Logger, stdout io.Writer) error {
	if beside.Limit >= o.rescueAfter {
		// Then River's rescuer re-queues a stuck job before jobguard could
		// decide on it, and jobguard's limit never applies.
		log.WarnContext(ctx, "river: the job type's limit is not below River's RescueStuckJobsAfter",
			slog.Duration("limit", beside.Limit), slog.Duration("rescue_after", o.rescueAfter))
	}
	conns, err := flow.Connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conns.Close()

	// 1. River's own tables, by River's own migrations, in the examples'
	// schema beside the jobs table.
	if err := migrateRiver(ctx, conns, riverLog); err != nil {
		return err
	}

	// 2. jobguard's parts, the middleware and the processor (see wire).
	chapters, guarded, err := wire(ctx, conns, cfg, beside, o.queue, sim.Model{Call: o.call()}, log)
	if err != nil {
		return err
	}

	// 3. A River client that works the chapter queue under the middleware.
	client, err := newClient(conns, o, &ChapterWorker{Chapters: chapters, Log: log}, guarded, riverLog)
	if err != nil {
		return err
	}
	events, unsubscribe := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobCancelled,
		river.EventKindJobFailed, river.EventKindJobSnoozed)
	defer unsubscribe()
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := client.Stop(stopCtx); err != nil {
			log.WarnContext(ctx, "river: stop client", slog.Any("error", err))
		}
	}()

	// 4. Queue the job: its row in the jobs table, then the River job that
	// carries the row's id.
	jobID, riverID, err := enqueue(ctx, conns, client, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "queued chapter job %s as River job %d: add %d week(s) to %s\n", jobID, riverID, o.weeks, o.course)

	// 5. River works it; print what River made of the outcome.
	ev, err := await(ctx, events, riverID, o.wait)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "River job %d: %s\n", riverID, outcome(ev))
	if ev.Kind == river.EventKindJobFailed {
		return errors.New("the job failed with an error River retries")
	}

	// 6. With -redeliver, River delivers the refused job again, as it would
	// after its rescuer re-queued it: the start guard refuses it.
	if o.redeliver && ev.Kind == river.EventKindJobCancelled {
		if _, err := client.JobRetry(ctx, riverID); err != nil {
			return fmt.Errorf("retry River job %d: %w", riverID, err)
		}
		if ev, err = await(ctx, events, riverID, o.wait); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "River job %d redelivered: %s\n", riverID, outcome(ev))
	}

	// 7. What became of the job, the course and the River job.
	return printOutcome(ctx, conns, o.course, jobID, riverID, stdout)
}

// printOutcome prints the job's status, the River job's state, and the
// course's status and the chapter rows the job wrote.
func printOutcome(ctx context.Context, conns *flow.Conns, course, jobID string, riverID int64, stdout io.Writer) error {
	var status, reason, riverState string
	var total, rows int
	if err := conns.Pool.QueryRow(ctx, `SELECT c.status, c.weeks,
		(SELECT count(*) FROM chapters WHERE job_id = $2),
		(SELECT status || coalesce(': ' || failure_reason, '') FROM jobs WHERE id = $2),
		(SELECT state::text FROM river_job WHERE id = $3)
		FROM courses c WHERE c.id = $1`, course, jobID, riverID).
		Scan(&status, &total, &rows, &reason, &riverState); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "job %s: %s; River job %d: %s\n", jobID, reason, riverID, riverState)
	fmt.Fprintf(stdout, "course %s: status %s, %d week(s); chapter rows written by this job: %d\n", course, status, total, rows)
	return nil
}

// call is the simulated model call of -latency and -hang.
func (o options) call() sim.Call {
	call := sim.Call{Latency: o.latency}
	if o.hang > 0 {
		call.Hang = sim.HangFor(o.hang)
	}
	return call
}

// migrateRiver creates River's tables with River's own migrations, in the
// examples' schema.
func migrateRiver(ctx context.Context, conns *flow.Conns, riverLog *slog.Logger) error {
	migrator, err := rivermigrate.New(riverpgxv5.New(conns.Pool), &rivermigrate.Config{Schema: conns.Schema, Logger: riverLog})
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate River: %w", err)
	}
	return nil
}

// newClient is a River client that works the chapter queue with worker,
// under the guarded middleware.
func newClient(conns *flow.Conns, o options, worker *ChapterWorker, guarded rivertype.Middleware,
	riverLog *slog.Logger) (*river.Client[pgx.Tx], error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	return river.NewClient(riverpgxv5.New(conns.Pool), &river.Config{
		Schema:               conns.Schema,
		Queues:               map[string]river.QueueConfig{o.queue: {MaxWorkers: 4}},
		Workers:              workers,
		Middleware:           []rivertype.Middleware{guarded},
		JobTimeout:           o.jobTimeout,
		RescueStuckJobsAfter: o.rescueAfter,
		FetchCooldown:        20 * time.Millisecond,
		FetchPollInterval:    200 * time.Millisecond,
		Logger:               riverLog,
	})
}

// enqueue queues a chapter job of o.course: its row in the jobs table,
// then the River job that carries the row's id.
func enqueue(ctx context.Context, conns *flow.Conns, client *river.Client[pgx.Tx], o options) (jobID string, riverID int64, err error) {
	if _, err := conns.Pool.Exec(ctx, `INSERT INTO courses (id, title) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`,
		o.course, "Course "+o.course); err != nil {
		return "", 0, err
	}
	if jobID, err = flow.EnqueueChapter(ctx, conns.Pool, o.course, o.weeks); err != nil {
		return "", 0, err
	}
	ins, err := client.Insert(ctx, ChapterArgs{JobID: jobID}, &river.InsertOpts{Queue: o.queue})
	if err != nil {
		return "", 0, fmt.Errorf("insert River job: %w", err)
	}
	return jobID, ins.Job.ID, nil
}

// wire builds the parts of jobguard this command uses, each from the ones
// before it, and returns the processor and the middleware: the guard over
// the jobs table, with the settings every process must agree on; the start
// guard; the process's watcher, unless -notices off; the middleware over
// both; and, with -reclaim, a reclaimer beside the worker that watches
// River's queue through reclaim/riversource (River's running jobs,
// attempted_at as the start of the attempt). What it starts runs until
// conns.Close.
func wire(ctx context.Context, conns *flow.Conns, cfg flow.Config, beside flow.Beside, queue string, model sim.Model, log *slog.Logger) (*flow.Chapters, *riverguard.Middleware, error) {
	guard, err := jobguard.NewWithConfig(ctx, conns.Pool, jobguard.DefaultTable(), jobguard.GuardConfig{Shared: cfg.Shared()})
	if err != nil {
		return nil, nil, err
	}
	starts, err := jobguard.NewStartGuard(guard, conns.Redis, jobguard.StartGuardConfig{Logger: log})
	if err != nil {
		return nil, nil, err
	}
	transport, notices := conns.Transport()
	var watcher *watch.Watcher
	if notices {
		// One subscription for the process: a reclaim's notice cancels the
		// worker's context of the execution that lost its job.
		watcher, err = watch.New(watch.Config{Guard: guard, DB: conns.Pool, Transport: transport, Logger: log})
		if err != nil {
			return nil, nil, err
		}
		if err := conns.RunWatcher(ctx, watcher); err != nil {
			return nil, nil, err
		}
	}
	// For chapter jobs, the row named by the args' job_id, as riversource
	// reads it.
	guarded, err := riverguard.New(riverguard.Config{StartGuard: starts, DB: conns.Pool, Watcher: watcher,
		Kinds: []string{flow.TypeChapter}, Logger: log})
	if err != nil {
		return nil, nil, err
	}

	if err := flow.SetLimit(ctx, conns.Pool, flow.TypeChapter, beside.Limit); err != nil {
		return nil, nil, err
	}
	if beside.Reclaim {
		src, err := riversource.New(riversource.Config{DB: conns.Pool, Schema: conns.Schema, Queues: []string{queue}})
		if err != nil {
			return nil, nil, err
		}
		rules, err := flow.ParentRules()
		if err != nil {
			return nil, nil, err
		}
		// A sweep may take longer than a short -interval on a busy
		// machine; it is bounded by a minute, not by the interval.
		rc := reclaim.Config{Guard: guard, DB: conns.Pool, Redis: conns.Redis, Source: src, OnReclaim: rules,
			NoProgress: beside.NoProgress, Interval: beside.Interval, SweepTimeout: max(beside.Interval, time.Minute), Logger: log}
		if notices {
			if rc.Notices, err = watch.NewPublisher(guard, transport); err != nil {
				return nil, nil, err
			}
		}
		r, err := reclaim.New(rc)
		if err != nil {
			return nil, nil, err
		}
		conns.Go(ctx, r.Run)
	}
	// The middleware starts and watches each execution, not the processor.
	return &flow.Chapters{Guard: guard, DB: conns.Pool, Model: model}, guarded, nil
}

// await returns the next event of River job id.
func await(ctx context.Context, events <-chan *river.Event, id int64, wait time.Duration) (*river.Event, error) {
	timeout := time.After(wait)
	for {
		select {
		case ev := <-events:
			if ev.Job != nil && ev.Job.ID == id {
				return ev, nil
			}
		case <-timeout:
			return nil, fmt.Errorf("River did not work job %d within %s", id, wait)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// outcome renders what River did with the job, and why.
func outcome(ev *river.Event) string {
	s := string(ev.Job.State)
	if ev.Kind == river.EventKindJobCancelled {
		s += " (not retried)"
	}
	if n := len(ev.Job.Errors); n > 0 && ev.Job.State != rivertype.JobStateCompleted {
		s += ": " + ev.Job.Errors[n-1].Error
	}
	return s
}

// lockedWriter serializes the writes of the command's two loggers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
