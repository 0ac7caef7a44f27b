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
// The processor itself is examples/internal/flow/export.go; the parent rule
// that fails only the export status is in examples/internal/flow/reclaim.go.
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
	cfg.Logger = log

	env, err := flow.Open(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "export: %v\n", err)
		return 1
	}
	defer env.Close()
	stopReclaimer, err := beside.Start(ctx, env, flow.TypeExport)
	defer stopReclaimer()
	if err == nil {
		_, err = env.Pool.Exec(ctx, `INSERT INTO documents (id, title) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`,
			*doc, "Document "+*doc)
	}
	var jobID string
	if err == nil {
		jobID, err = flow.EnqueueExport(ctx, env, *doc)
	}
	if err != nil {
		fmt.Fprintf(stderr, "export: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "queued export job %s: export %s\n", jobID, *doc)

	render := sim.Call{Latency: *latency}
	if *hang > 0 {
		render.Hang = sim.HangFor(*hang)
	}
	exports := &flow.Exports{Env: env, Render: render}
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
	if err := env.Pool.QueryRow(ctx, `SELECT status, export_status FROM documents WHERE id = $1`, *doc).
		Scan(&status, &exportStatus); err != nil {
		fmt.Fprintf(stderr, "export: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "document %s: status %s, export %s\n", *doc, status, exportStatus)
	return 0
}
