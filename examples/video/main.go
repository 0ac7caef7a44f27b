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
// The processor itself is examples/internal/flow/video.go.
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

	"github.com/jobguard/jobguard/examples/internal/flow"
	"github.com/jobguard/jobguard/examples/internal/sim"
	"github.com/jobguard/jobguard/heartbeat"
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
	flags := flag.NewFlagSet("video", flag.ContinueOnError)
	flags.SetOutput(stderr)
	cfg.Flags(flags)
	beside.Flags(flags)
	video := flags.String("video", "video-1", "video to encode (created if missing, owned by account acct-1)")
	steps := flags.Int("steps", 20, "chunks the encoder writes, reporting progress after each")
	step := flags.Duration("step", 100*time.Millisecond, "time one chunk takes")
	seconds := flags.Int("seconds", 90, "length of the video, in seconds (the usage billed)")
	hang := flags.Duration("hang", 0, "how long the final mux hangs, after the last progress report")
	flags.DurationVar(&cfg.HeartbeatInterval, "heartbeat", heartbeat.IntervalDefault, "least time between two heartbeat writes of the job")
	flags.StringVar(&cfg.FilesDir, "files", os.TempDir(), "directory for the encoded files")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	cfg.Logger = log

	env, err := flow.Open(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "video: %v\n", err)
		return 1
	}
	defer env.Close()
	stopReclaimer, err := beside.Start(ctx, env, flow.TypeVideo)
	defer stopReclaimer()
	if err == nil {
		_, err = env.Pool.Exec(ctx, `INSERT INTO accounts (id) VALUES ('acct-1') ON CONFLICT (id) DO NOTHING;`)
	}
	if err == nil {
		_, err = env.Pool.Exec(ctx, `INSERT INTO videos (id, account_id, title) VALUES ($1, 'acct-1', $2)
			ON CONFLICT (id) DO NOTHING`, *video, "Video "+*video)
	}
	var jobID string
	if err == nil {
		jobID, err = flow.EnqueueVideo(ctx, env, *video)
	}
	if err != nil {
		fmt.Fprintf(stderr, "video: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "queued video job %s: encode %s\n", jobID, *video)

	enc := sim.Encoder{Steps: *steps, StepDelay: *step, Seconds: *seconds}
	if *hang > 0 {
		enc.Hang = sim.HangFor(*hang)
	}
	videos := &flow.Videos{Env: env, Encoder: enc}
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
	if err := env.Pool.QueryRow(ctx, `SELECT v.status,
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
