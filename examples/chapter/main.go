// Command chapter runs the "add weeks to a course" processor once: it queues
// a chapter job for a course and delivers it to the worker, which calls the
// (simulated) model outside any transaction and then saves the weeks in one
// short transaction whose first write is the conditional completion.
//
//	go run ./examples/chapter -course course-1 -weeks 2
//
// Make the model call hang past the job type's limit, with a reclaimer in
// the same process, to watch the reclaim's notice cancel the call; with
// -notices off the call runs to its end and its save is refused before any
// row is written:
//
//	go run ./examples/chapter -hang 3s -limit 1s -no-progress 1s -reclaim
//	go run ./examples/chapter -hang 3s -limit 1s -no-progress 1s -reclaim -notices off
//
// The command wires the library where it can be read: run connects
// (flow.Connect: the pool, Redis, the migrations), and wire builds the
// guard over the jobs table, the start guard, the watcher and, with
// -reclaim, the reclaimer, and hands them to the processor,
// examples/internal/flow/chapter.go.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jobguard/jobguard/examples/internal/flow"
	"github.com/jobguard/jobguard/examples/internal/sim"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/watch"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run returns the exit code: 0 when the job completed or was refused by a
// guard (both are outcomes this example shows), 1 on any other error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cfg flow.Config
	var beside flow.Beside
	fs := flag.NewFlagSet("chapter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.Flags(fs)
	beside.Flags(fs)
	course := fs.String("course", "course-1", "course to add weeks to (created if missing)")
	weeks := fs.Int("weeks", 2, "weeks to add")
	latency := fs.Duration("latency", 500*time.Millisecond, "how long the model call takes")
	hang := fs.Duration("hang", 0, "how long the model call hangs before it starts answering")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	call := sim.Call{Latency: *latency}
	if *hang > 0 {
		call.Hang = sim.HangFor(*hang)
	}

	conns, err := flow.Connect(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "chapter: %v\n", err)
		return 1
	}
	defer conns.Close()
	chapters, err := wire(ctx, conns, cfg, beside, sim.Model{Call: call}, log)
	if err == nil {
		_, err = conns.Pool.Exec(ctx, `INSERT INTO courses (id, title) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`,
			*course, "Course "+*course)
	}
	var jobID string
	if err == nil {
		jobID, err = flow.EnqueueChapter(ctx, conns.Pool, *course, *weeks)
	}
	if err != nil {
		fmt.Fprintf(stderr, "chapter: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "queued chapter job %s: add %d week(s) to %s\n", jobID, *weeks, *course)

	var res flow.ChapterResult
	err = flow.Deliver(ctx, log, flow.TypeChapter, jobID, func(ctx context.Context, id string) (err error) {
		res, err = chapters.Process(ctx, id)
		return err
	})
	switch {
	case err == nil:
		fmt.Fprintf(stdout, "completed: %s now has %d week(s)\n", res.CourseID, res.Total)
	case jobguard.IsPermanent(err):
		fmt.Fprintf(stdout, "refused: %v\n", err)
	default:
		return 1 // logged by Deliver
	}

	var status string
	var total, rows int
	if err := conns.Pool.QueryRow(ctx, `SELECT c.status, c.weeks,
		(SELECT count(*) FROM chapters WHERE job_id = $2)
		FROM courses c WHERE c.id = $1`, *course, jobID).Scan(&status, &total, &rows); err != nil {
		fmt.Fprintf(stderr, "chapter: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "course %s: status %s, %d week(s); chapter rows written by this job: %d\n", *course, status, total, rows)
	return 0
}

// wire builds the parts of the library this command uses, each from the
// ones before it, and returns the processor: the guard over the jobs
// table, with the settings every process must agree on; the start guard;
// the process's watcher, unless -notices off; and, with -reclaim, a
// reclaimer beside the worker. What it starts runs until conns.Close.
func wire(ctx context.Context, conns *flow.Conns, cfg flow.Config, beside flow.Beside, model sim.Model, log *slog.Logger) (*flow.Chapters, error) {
	guard, err := jobguard.NewWithConfig(ctx, conns.Pool, jobguard.DefaultTable(), jobguard.GuardConfig{Shared: cfg.Shared()})
	if err != nil {
		return nil, err
	}
	starts, err := jobguard.NewStartGuard(guard, conns.Redis, jobguard.StartGuardConfig{Logger: log})
	if err != nil {
		return nil, err
	}
	transport, notices := conns.Transport()
	var watcher *watch.Watcher
	if notices {
		// One subscription for the process: a reclaim's notice cancels the
		// model call of the execution that lost its job.
		watcher, err = watch.New(watch.Config{Guard: guard, DB: conns.Pool, Transport: transport, Logger: log})
		if err != nil {
			return nil, err
		}
		if err := conns.RunWatcher(ctx, watcher); err != nil {
			return nil, err
		}
	}

	if err := flow.SetLimit(ctx, conns.Pool, flow.TypeChapter, beside.Limit); err != nil {
		return nil, err
	}
	if beside.Reclaim {
		rules, err := flow.ParentRules()
		if err != nil {
			return nil, err
		}
		rc := reclaim.Config{Guard: guard, DB: conns.Pool, Redis: conns.Redis, OnReclaim: rules,
			NoProgress: beside.NoProgress, Interval: beside.Interval, Logger: log}
		if notices {
			if rc.Notices, err = watch.NewPublisher(guard, transport); err != nil {
				return nil, err
			}
		}
		r, err := reclaim.New(rc)
		if err != nil {
			return nil, err
		}
		conns.Go(ctx, r.Run)
	}
	return &flow.Chapters{Guard: guard, Starts: starts, DB: conns.Pool, Watcher: watcher, Model: model}, nil
}
