package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/jobguard/jobguard/examples/internal/flow"
	"github.com/jobguard/jobguard/examples/internal/sim"
)

// envWorker, set in a worker process the demo starts, holds its JSON
// workerConfig.
const envWorker = "JOBGUARD_DEMO_WORKER"

// workerConfig is what a worker process needs: the demo's servers and
// tables, and the job to process.
type workerConfig struct {
	DatabaseURL string `json:"database_url"`
	RedisURL    string `json:"redis_url"`
	Schema      string `json:"schema"`
	Prefix      string `json:"prefix"`
	FilesDir    string `json:"files_dir"`
	JobID       string `json:"job_id"`
}

// workerMain is the body of a worker process: it processes one video job
// and dies of SIGKILL before the first metadata update of its finalize,
// once the completion and its finalize record have committed. It returns
// only when it did not get there.
func workerMain(raw string, stderr io.Writer) int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(stderr, "worker config:", err)
		return 2
	}
	ctx := context.Background()
	fcfg := flow.Config{DatabaseURL: cfg.DatabaseURL, RedisURL: cfg.RedisURL, Schema: cfg.Schema, Prefix: cfg.Prefix,
		Notices: flow.NoticesOff}
	conns, err := flow.Connect(ctx, fcfg)
	if err != nil {
		fmt.Fprintln(stderr, "worker:", err)
		return 2
	}
	defer conns.Close()
	kill := func(context.Context, string) {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	w, err := wire(ctx, conns, fcfg, cfg.FilesDir, slog.New(slog.NewTextHandler(stderr, nil)), kill)
	if err != nil {
		fmt.Fprintln(stderr, "worker:", err)
		return 2
	}
	_, err = w.videos(sim.Encoder{Steps: 4, StepDelay: stepDelay, Seconds: 75}).Process(ctx, cfg.JobID)
	fmt.Fprintf(stderr, "worker: the job ended without the kill (%v)\n", err)
	return 3
}

// Scene 6: a worker process is killed after its completion committed; the
// settle sweep finishes its metadata and bills it once.
func (d *demo) killedAfterCompletion(ctx context.Context) error {
	tl, w := d.tl, d.w
	tl.heading("Scene 6: a worker process is killed right after its video job's completion commits")
	jobID, err := flow.EnqueueVideo(ctx, w.pool, "video-3")
	if err != nil {
		return err
	}
	if err := d.killWorkerAfterCompletion(ctx, jobID); err != nil {
		return err
	}

	var status, video, state string
	var ledger int
	var pending []string
	err = w.pool.QueryRow(ctx, `SELECT j.status, v.status, s.state, s.pending,
			(SELECT count(*) FROM usage_ledger WHERE job_id = $1::text)
		FROM jobs j JOIN videos v ON v.id = j.parent_id
		LEFT JOIN job_settlements s ON s.job_id = $1::text AND s.generation = j.generation
		WHERE j.id = $1::uuid`, jobID).Scan(&status, &video, &state, &pending, &ledger)
	if err != nil {
		return err
	}
	tl.expect(status == "COMPLETED" && video != "READY" && ledger == 0 && state == "pending",
		"job %s is %s, video-3 is %s, %d usage rows: on its own, nothing would ever bill it; its finalize record, committed with the completion, is %s with %v pending",
		short(jobID), status, video, ledger, state, pending)
	return d.settleSweepBillsOnce(ctx, jobID)
}

// killWorkerAfterCompletion runs job jobID in a worker process that is
// killed right after its completion commits, and tells it.
func (d *demo) killWorkerAfterCompletion(ctx context.Context, jobID string) error {
	tl, w := d.tl, d.w
	raw, err := json.Marshal(workerConfig{DatabaseURL: d.urls.database, RedisURL: d.urls.redis, Schema: d.conns.Schema,
		Prefix: w.guard.Shared().Prefix, FilesDir: w.files, JobID: jobID})
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envWorker+"="+string(raw))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the worker process: %w", err)
	}
	tl.at("queued video job %s (encode video-3); worker process %d takes it, encodes, finalizes", short(jobID), cmd.Process.Pid)
	werr := cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	killed := ws.Signaled() && ws.Signal() == syscall.SIGKILL
	tl.at("worker process %d was killed (%v) after its completion committed, before its first metadata update", cmd.Process.Pid, werr)
	if !killed {
		tl.say("%s", out.String())
	}
	tl.expect(killed, "the worker died of SIGKILL: no deferred call, no rollback, no chance to bill")
	return nil
}

// settleSweepBillsOnce lets the settle sweep take the finalize record of
// job jobID, which its killed worker left, and tells what it settled and
// billed, once.
func (d *demo) settleSweepBillsOnce(ctx context.Context, jobID string) error {
	tl, w := d.tl, d.w
	// The record is left to its worker for the grace period; the sweep
	// takes it once that has passed.
	if err := sleep(ctx, settleGrace); err != nil {
		return err
	}
	rep, err := w.settler.Sweep(ctx)
	if err != nil {
		return err
	}
	tl.at("settle sweep: taken %d, settled %d, updates run %d, usage rows written %d, given up %d",
		rep.Taken, rep.Settled, rep.Updates, rep.Accrued, rep.GivenUp)
	var video, asset, state string
	var seconds int64
	var ledger int
	var published bool
	err = w.pool.QueryRow(ctx, `SELECT v.status, a.status, c.published, s.state,
			(SELECT count(*) FROM usage_ledger WHERE job_id = $1::text), (SELECT quantity FROM usage_ledger WHERE job_id = $1::text)
		FROM jobs j JOIN videos v ON v.id = j.parent_id JOIN assets a ON a.video_id = v.id
		JOIN contents c ON c.video_id = v.id JOIN job_settlements s ON s.job_id = $1::text
		WHERE j.id = $1::uuid`, jobID).Scan(&video, &asset, &published, &state, &ledger, &seconds)
	if err != nil {
		return err
	}
	tl.expect(rep.Settled == 1 && rep.Updates == 3 && rep.Accrued == 1 && video == "READY" && asset == "READY" && published && ledger == 1,
		"the sweep ran the three metadata updates through their registered handlers: video-3 is %s, its asset %s, its content published=%v; its %ds were billed in the transaction that confirmed the record (%s)",
		video, asset, published, seconds, state)
	again, err := w.settler.Sweep(ctx)
	if err != nil {
		return err
	}
	ledger, _ = d.count(ctx, `SELECT count(*) FROM usage_ledger WHERE job_id = $1::text`, jobID)
	tl.expect(again.Taken == 0 && ledger == 1, "a second sweep finds nothing to do: %d usage row, billed exactly once", ledger)
	return nil
}

// runWorkerIfAsked runs a worker process's body when this process was
// started as one, and exits.
func runWorkerIfAsked() {
	if raw := os.Getenv(envWorker); raw != "" {
		os.Exit(workerMain(raw, os.Stderr))
	}
}

// settleGrace is how long a finalize record is left to its worker before
// the settle sweep may take it.
const settleGrace = 300 * time.Millisecond
