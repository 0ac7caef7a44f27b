// Command video runs the video composition processor once: it queues a job
// for a video and delivers it to the worker, which encodes a file (heartbeat
// on every chunk of progress), upserts a slide asset, finalizes with the
// video, asset and content metadata updated in parallel, and bills the
// video's seconds only for a confirmed finalize.
//
//	go run ./examples/video -video video-1 -steps 20 -step 100ms
//
// Make the final mux hang past the job type's limit, with a reclaimer in
// the same process, to watch the reclaim's notice cancel the mux and the
// file be compensated; with -notices off the mux runs to its end and the
// late finalize is rejected, nothing billed, and the file and asset
// compensated:
//
//	go run ./examples/video -hang 3s -limit 1s -no-progress 1s -heartbeat 100ms -reclaim
//	go run ./examples/video -hang 3s -limit 1s -no-progress 1s -heartbeat 100ms -reclaim -notices off
//
// The command wires the library where it can be read: run connects
// (flow.Connect: the pool, Redis, the migrations), and wire builds the
// guard over the jobs table, the start guard, the heartbeat, the
// artifacts, the settler, the watcher and, with -reclaim, the reclaimer,
// and hands them to the processor, examples/internal/flow/video.go.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/examples/internal/flow"
	"github.com/jobguard/jobguard/examples/internal/sim"
	"github.com/jobguard/jobguard/heartbeat"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/watch"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are what the command's own flags give wire.
type options struct {
	heartbeat time.Duration
	files     string
	encoder   sim.Encoder
}

// run returns the exit code: 0 when the job completed or was refused by a
// guard (both are outcomes this example shows), 1 on any other error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cfg flow.Config
	var beside flow.Beside
	var o options
	flags := flag.NewFlagSet("video", flag.ContinueOnError)
	flags.SetOutput(stderr)
	cfg.Flags(flags)
	beside.Flags(flags)
	video := flags.String("video", "video-1", "video to encode (created if missing, owned by account acct-1)")
	steps := flags.Int("steps", 20, "chunks the encoder writes, reporting progress after each")
	step := flags.Duration("step", 100*time.Millisecond, "time one chunk takes")
	seconds := flags.Int("seconds", 90, "length of the video, in seconds (the usage billed)")
	hang := flags.Duration("hang", 0, "how long the final mux hangs, after the last progress report")
	flags.DurationVar(&o.heartbeat, "heartbeat", heartbeat.IntervalDefault, "least time between two heartbeat writes of the job")
	flags.StringVar(&o.files, "files", os.TempDir(), "directory for the encoded files")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	o.encoder = sim.Encoder{Steps: *steps, StepDelay: *step, Seconds: *seconds}
	if *hang > 0 {
		o.encoder.Hang = sim.HangFor(*hang)
	}

	conns, err := flow.Connect(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "video: %v\n", err)
		return 1
	}
	defer conns.Close()
	videos, err := wire(ctx, conns, cfg, beside, o, log)
	if err == nil {
		_, err = conns.Pool.Exec(ctx, `INSERT INTO accounts (id) VALUES ('acct-1') ON CONFLICT (id) DO NOTHING;`)
	}
	if err == nil {
		_, err = conns.Pool.Exec(ctx, `INSERT INTO videos (id, account_id, title) VALUES ($1, 'acct-1', $2)
			ON CONFLICT (id) DO NOTHING`, *video, "Video "+*video)
	}
	var jobID string
	if err == nil {
		jobID, err = flow.EnqueueVideo(ctx, conns.Pool, *video)
	}
	if err != nil {
		fmt.Fprintf(stderr, "video: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "queued video job %s: encode %s\n", jobID, *video)

	var res flow.VideoResult
	err = flow.Deliver(ctx, log, flow.TypeVideo, jobID, func(ctx context.Context, id string) (err error) {
		res, err = videos.Process(ctx, id)
		return err
	})
	switch {
	case err == nil:
		fmt.Fprintf(stdout, "completed: %s, %d s; finalize confirmed: %v; usage accrued: %v\n",
			res.File, res.Seconds, res.Finalize.Confirmed(), res.Accrued)
	case jobguard.IsPermanent(err):
		fmt.Fprintf(stdout, "refused: %v\n", err)
		fmt.Fprintf(stdout, "finalize rejected: %v\n", res.Finalize.Rejected())
		if res.File != "" {
			_, statErr := os.Stat(res.File)
			fmt.Fprintf(stdout, "file %s removed: %v\n", res.File, errors.Is(statErr, fs.ErrNotExist))
		}
	default:
		return 1 // logged by Deliver
	}

	var status string
	var assets, billed int
	var ledger int
	if err := conns.Pool.QueryRow(ctx, `SELECT v.status,
		(SELECT count(*) FROM assets WHERE video_id = v.id),
		(SELECT count(*) FROM usage_ledger WHERE job_id = $2),
		(SELECT video_seconds FROM accounts WHERE id = v.account_id)
		FROM videos v WHERE v.id = $1`, *video, jobID).Scan(&status, &assets, &ledger, &billed); err != nil {
		fmt.Fprintf(stderr, "video: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "video %s: status %s; asset rows: %d; usage rows of this job: %d; account acct-1 billed %d s in all\n",
		*video, status, assets, ledger, billed)
	return 0
}

// wire builds the parts of the library this command uses, each from the
// ones before it, and returns the processor: the guard over the jobs
// table, with the settings every process must agree on; the start guard;
// the heartbeat; the artifacts, with the examples' compensators; the
// settler, with the video's metadata updates and billing; the process's
// watcher, unless -notices off; and, with -reclaim, a reclaimer beside the
// worker. What it starts runs until conns.Close.
func wire(ctx context.Context, conns *flow.Conns, cfg flow.Config, beside flow.Beside, o options, log *slog.Logger) (*flow.Videos, error) {
	guard, err := jobguard.NewWithConfig(ctx, conns.Pool, jobguard.DefaultTable(), jobguard.GuardConfig{Shared: cfg.Shared()})
	if err != nil {
		return nil, err
	}
	starts, err := jobguard.NewStartGuard(guard, conns.Redis, jobguard.StartGuardConfig{Logger: log})
	if err != nil {
		return nil, err
	}
	beats := heartbeat.New(guard, heartbeat.Config{Interval: o.heartbeat, Logger: log})
	artifacts, err := compensate.New(ctx, compensate.Config{Guard: guard, DB: conns.Pool,
		Compensators: flow.Compensators(), Logger: log})
	if err != nil {
		return nil, err
	}
	settler, err := settle.New(ctx, settle.Config{Guard: guard, DB: conns.Pool,
		Handlers: flow.VideoHandlers(conns.Pool, nil), Increments: flow.VideoIncrements(), Logger: log})
	if err != nil {
		return nil, err
	}
	transport, notices := conns.Transport()
	var watcher *watch.Watcher
	if notices {
		// One subscription for the process: a reclaim's notice cancels the
		// encode of the execution that lost its job.
		watcher, err = watch.New(watch.Config{Guard: guard, DB: conns.Pool, Transport: transport, Logger: log})
		if err != nil {
			return nil, err
		}
		if err := conns.RunWatcher(ctx, watcher); err != nil {
			return nil, err
		}
	}

	if err := flow.SetLimit(ctx, conns.Pool, flow.TypeVideo, beside.Limit); err != nil {
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
	return &flow.Videos{Guard: guard, Starts: starts, DB: conns.Pool, Heartbeat: beats, Watcher: watcher,
		Artifacts: artifacts, Settler: settler, FilesDir: o.files, Log: log, Encoder: o.encoder}, nil
}
