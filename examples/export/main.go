// Command export runs the export processor once: it queues an export of a
// READY document and delivers it to the worker, which renders it (simulated)
// outside any transaction and records the export with a conditional
// completion as its save's first write.
//
//	go run ./examples/export -document doc-1
//
// Make the render hang past the job type's limit, with a reclaimer in the
// same process: the reclaim marks only the export FAILED, and the document,
// whose content was never broken, stays READY:
//
//	go run ./examples/export -hang 3s -limit 1s -no-progress 1s -reclaim
//
// The command wires the library where it can be read: run connects
// (flow.Connect: the pool, Redis, the migrations), and wire builds the
// guard over the jobs table, the start guard and, with -reclaim, the
// reclaimer, and hands them to the processor,
// examples/internal/flow/export.go. The parent rule that fails only the
// export status is in examples/internal/flow/reclaim.go.
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
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.Flags(fs)
	beside.Flags(fs)
	doc := fs.String("document", "doc-1", "document to export (created READY if missing)")
	latency := fs.Duration("latency", 300*time.Millisecond, "how long the render takes")
	hang := fs.Duration("hang", 0, "how long the render hangs before it starts")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	render := sim.Call{Latency: *latency}
	if *hang > 0 {
		render.Hang = sim.HangFor(*hang)
	}

	conns, err := flow.Connect(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "export: %v\n", err)
		return 1
	}
	defer conns.Close()
	exports, err := wire(ctx, conns, cfg, beside, render, log)
	if err == nil {
		_, err = conns.Pool.Exec(ctx, `INSERT INTO documents (id, title) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`,
			*doc, "Document "+*doc)
	}
	var jobID string
	if err == nil {
		jobID, err = flow.EnqueueExport(ctx, conns.Pool, *doc)
	}
	if err != nil {
		fmt.Fprintf(stderr, "export: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "queued export job %s: export %s\n", jobID, *doc)

	var path string
	err = flow.Deliver(ctx, log, flow.TypeExport, jobID, func(ctx context.Context, id string) (err error) {
		path, err = exports.Process(ctx, id)
		return err
	})
	switch {
	case err == nil:
		fmt.Fprintf(stdout, "completed: %s\n", path)
	case jobguard.IsPermanent(err):
		fmt.Fprintf(stdout, "refused: %v\n", err)
	default:
		return 1 // logged by Deliver
	}

	var status, exportStatus string
	if err := conns.Pool.QueryRow(ctx, `SELECT status, export_status FROM documents WHERE id = $1`, *doc).
		Scan(&status, &exportStatus); err != nil {
		fmt.Fprintf(stderr, "export: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "document %s: status %s, export %s\n", *doc, status, exportStatus)
	return 0
}

// wire builds the parts of the library this command uses, each from the
// ones before it, and returns the processor: the guard over the jobs
// table, with the settings every process must agree on; the start guard;
// and, with -reclaim, a reclaimer beside the worker, which announces its
// reclaims unless -notices off. The export processor runs its render
// without a watcher, so the process has none. What it starts runs until
// conns.Close.
func wire(ctx context.Context, conns *flow.Conns, cfg flow.Config, beside flow.Beside, render sim.Call, log *slog.Logger) (*flow.Exports, error) {
	guard, err := jobguard.NewWithConfig(ctx, conns.Pool, jobguard.DefaultTable(), jobguard.GuardConfig{Shared: cfg.Shared()})
	if err != nil {
		return nil, err
	}
	starts, err := jobguard.NewStartGuard(guard, conns.Redis, jobguard.StartGuardConfig{Logger: log})
	if err != nil {
		return nil, err
	}

	if err := flow.SetLimit(ctx, conns.Pool, flow.TypeExport, beside.Limit); err != nil {
		return nil, err
	}
	if beside.Reclaim {
		rules, err := flow.ParentRules()
		if err != nil {
			return nil, err
		}
		rc := reclaim.Config{Guard: guard, DB: conns.Pool, Redis: conns.Redis, OnReclaim: rules,
			NoProgress: beside.NoProgress, Interval: beside.Interval, Logger: log}
		if transport, notices := conns.Transport(); notices {
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
	return &flow.Exports{Guard: guard, Starts: starts, DB: conns.Pool, Render: render}, nil
}
