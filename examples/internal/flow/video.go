package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/examples/internal/sim"
	"github.com/jobguard/jobguard/heartbeat"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
	"github.com/jobguard/jobguard/watch"
)

// MeterVideoSeconds is the usage meter the video processor bills.
const MeterVideoSeconds = "video_seconds"

// Videos is the video composition processor: it encodes a file and upserts
// a slide asset (both recorded as artifacts of the execution, so a rejected
// completion compensates them), heartbeats on the encoder's progress, and
// finalizes through a settle.Settler: a record of what the finalize owes
// commits with the completion, the video, asset and content metadata are
// updated in parallel, and the seconds are billed once they all succeed.
// A worker that dies after its completion leaves the rest to the settle
// sweep, which bills it exactly once. The encode runs under the Watcher,
// so a reclaim cancels it at once; its file is then undone.
type Videos struct {
	// Guard guards the jobs table: it fails the jobs.
	Guard *jobguard.Guard
	// Starts starts each delivery as a new execution, and refuses a job
	// that was reclaimed.
	Starts *jobguard.StartGuard
	// DB reaches the jobs and the video tables, such as the process's
	// pool.
	DB jobguard.DB
	// Heartbeat writes the encoder's progress, and says when the job is
	// lost.
	Heartbeat *heartbeat.Heartbeat
	// Watcher cancels the encode of an execution that lost its job. Nil
	// runs without one: the encode runs until it returns (or a heartbeat
	// finds the job lost), and only the guarded finalize refuses what
	// follows.
	Watcher *watch.Watcher
	// Artifacts records the file and the slide asset of each execution,
	// and compensates them when it is rejected: built with Compensators.
	Artifacts *compensate.Artifacts
	// Settler finalizes the videos with a durable record, so that their
	// metadata updates and billed seconds survive a worker's crash: built
	// with VideoHandlers and VideoIncrements.
	Settler *settle.Settler
	// FilesDir receives the encoded files.
	FilesDir string
	// Log receives the warnings of heartbeats that could not be written.
	// Defaults to slog.Default().
	Log *slog.Logger
	// Encoder encodes the file.
	Encoder sim.Encoder
}

// VideoResult is what a video job did.
type VideoResult struct {
	// VideoID is the video the job encoded.
	VideoID string
	// File is the encoded file's path.
	File string
	// Seconds is the video's length, the usage billed.
	Seconds int
	// Accrued is true when this call billed the seconds.
	Accrued bool
	// Finalize is the outcome of the finalize: Confirmed, or Rejected when
	// the job was no longer this execution's.
	Finalize jobguard.Finalized
	// Settled is true when the finalize's record is confirmed and its
	// seconds billed; false when it was left to the settle sweep.
	Settled bool
}

// videoUpdate holds the arguments of a video's metadata updates, as its
// finalize record stores them.
type videoUpdate struct {
	VideoID string `json:"video_id"`
	File    string `json:"file"`
	Seconds int    `json:"seconds"`
	AssetID string `json:"asset_id"`
	Title   string `json:"title"`
}

// VideoHandlers are the metadata updates of a video's finalize, by name, over
// db, for settle.Config.Handlers of every process that finalizes videos or
// sweeps their records. Each sets rather than adds, so running it again
// changes nothing. before, when set, runs first with the update's name: the
// demo kills a worker there.
func VideoHandlers(db jobguard.DB, before func(ctx context.Context, update string)) map[string]settle.Handler {
	handler := func(name string, run func(ctx context.Context, exec jobguard.Execution, u videoUpdate) error) settle.Handler {
		return func(ctx context.Context, exec jobguard.Execution, raw json.RawMessage) error {
			if before != nil {
				before(ctx, name)
			}
			var u videoUpdate
			if err := json.Unmarshal(raw, &u); err != nil {
				return err
			}
			return run(ctx, exec, u)
		}
	}
	return map[string]settle.Handler{
		"video": handler("video", func(ctx context.Context, _ jobguard.Execution, u videoUpdate) error {
			return exec1(ctx, db, `UPDATE videos SET status = 'READY', file_path = $2, duration_seconds = $3
				WHERE id = $1 AND status <> 'DELETED'`, u.VideoID, u.File, u.Seconds)
		}),
		"asset": handler("asset", func(ctx context.Context, exec jobguard.Execution, u videoUpdate) error {
			return exec1(ctx, db, `UPDATE assets SET status = 'READY' WHERE id = $1 AND generation = $2`,
				u.AssetID, exec.Generation)
		}),
		"content": handler("content", func(ctx context.Context, _ jobguard.Execution, u videoUpdate) error {
			return exec1(ctx, db, `INSERT INTO contents (video_id, title, duration_seconds, published)
				VALUES ($1, $2, $3, true)
				ON CONFLICT (video_id) DO UPDATE SET duration_seconds = $3, published = true`,
				u.VideoID, u.Title, u.Seconds)
		}),
	}
}

// VideoIncrements bill the seconds of the videos to their accounts, by
// meter, for settle.Config.Increments of every process that finalizes
// videos or sweeps their records.
func VideoIncrements() map[string]settle.Increment {
	return map[string]settle.Increment{
		MeterVideoSeconds: func(ctx context.Context, tx pgx.Tx, _ jobguard.Execution, u usage.Entry) error {
			_, err := tx.Exec(ctx, `UPDATE accounts SET video_seconds = video_seconds + $2 WHERE id = $1`, u.Account, u.Quantity)
			return err
		},
	}
}

// EnqueueVideo queues a job that encodes video and marks it ENCODING. It
// returns the job id.
func EnqueueVideo(ctx context.Context, db jobguard.DB, videoID string) (string, error) {
	var id string
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO jobs (type, parent_id) VALUES ($1, $2) RETURNING id::text`,
			TypeVideo, videoID).Scan(&id); err != nil {
			return err
		}
		return setStatus(ctx, tx, `UPDATE videos SET status = 'ENCODING' WHERE id = $1`, videoID)
	})
	if err != nil {
		return "", fmt.Errorf("enqueue video job for %s: %w", videoID, err)
	}
	return id, nil
}

// Process runs one delivery of a video job.
func (v *Videos) Process(ctx context.Context, jobID string) (VideoResult, error) {
	exec, err := v.Starts.Start(ctx, v.DB, jobID)
	if err != nil {
		return VideoResult{}, fmt.Errorf("video: %w", err)
	}
	defer v.Heartbeat.Forget(jobID)
	var res VideoResult
	var account, title string
	err = v.DB.QueryRow(ctx, `SELECT v.id, v.account_id, v.title
		FROM jobs j JOIN videos v ON v.id = j.parent_id WHERE j.id = $1`, jobID).Scan(&res.VideoID, &account, &title)
	if err != nil {
		return res, giveUp(ctx, v.Guard, v.DB, exec, fmt.Errorf("video: read video: %w", err), "video: video unreadable")
	}

	// The file: recorded as an artifact before it exists, so that a crash
	// in between leaves a record rather than an untracked file.
	res.File = filepath.Join(v.FilesDir, fmt.Sprintf("%s-%.8s-g%d.mp4", res.VideoID, jobID, exec.Generation))
	if err := v.Artifacts.Record(ctx, v.DB, exec, KindFile, res.File); err != nil {
		return res, fmt.Errorf("video: %w", err)
	}
	// The encode runs under the watcher's context: a reclaim's notice
	// cancels it at once, and a heartbeat that finds the job lost tells the
	// watcher too.
	runCtx, release := watched(ctx, v.Watcher, exec)
	defer release()
	enc, err := v.encode(ctx, runCtx, exec, res.File)
	if lost := reclaimed(runCtx); err != nil && lost != nil {
		err = fmt.Errorf("encode cancelled: %w", lost)
	}
	if errors.Is(err, jobguard.ErrJobTerminal) {
		// The job was reclaimed (a notice, or a heartbeat found it lost):
		// stop, and undo what was made.
		return res, fmt.Errorf("video: %w", v.undo(ctx, exec, err))
	}
	if err != nil {
		// The encoder broke: fail the job, then undo the file. If the job
		// was lost meanwhile, Fail says so and the undo is the same.
		return res, v.undo(ctx, exec, giveUp(ctx, v.Guard, v.DB, exec, fmt.Errorf("video: %w", err), err.Error()))
	}
	res.Seconds = enc.Seconds

	// The slide asset: upserted, and recorded in the same transaction.
	assetID, err := v.slideAsset(ctx, exec, res.VideoID)
	if err != nil {
		return res, fmt.Errorf("video: slide asset: %w", err)
	}

	// The finalize: re-check, conditional completion with the finalize
	// record (the artifacts are kept in its transaction, or compensated if
	// it is rejected), then the metadata updates in parallel, and the
	// seconds billed once they all succeeded.
	u := videoUpdate{VideoID: res.VideoID, File: res.File, Seconds: res.Seconds, AssetID: assetID, Title: title}
	settled, err := v.Settler.Finalize(ctx, v.DB, exec, settle.Spec{
		Recheck: func(ctx context.Context) error {
			var status string
			if err := v.DB.QueryRow(ctx, `SELECT status FROM videos WHERE id = $1`, res.VideoID).Scan(&status); err != nil {
				return err
			}
			if status == "DELETED" {
				return fmt.Errorf("video %s was deleted", res.VideoID)
			}
			return nil
		},
		Complete: func(ctx context.Context, tx pgx.Tx) error { return v.Artifacts.Keep(ctx, tx, exec) },
		Updates:  []settle.Update{{Name: "video", Args: u}, {Name: "asset", Args: u}, {Name: "content", Args: u}},
		Usage: []usage.Entry{{Account: account, Meter: MeterVideoSeconds, Quantity: int64(res.Seconds),
			Attributes: map[string]any{"video_id": res.VideoID}}},
	})
	res.Finalize, res.Settled = settled.Finalized, settled.Settled
	res.Accrued = len(settled.Accruals) > 0 && settled.Accruals[0].Accrued
	switch {
	case errors.Is(err, jobguard.ErrStopped):
		// The re-check found the video deleted: nothing was completed, so
		// fail the job and undo its file and asset.
		return res, v.undo(ctx, exec, giveUp(ctx, v.Guard, v.DB, exec, fmt.Errorf("video: %w", err), "video: deleted before finalize"))
	case res.Finalize.Rejected():
		// The job is terminal for this execution: undo what it made.
		return res, fmt.Errorf("video: %w", v.undo(ctx, exec, err))
	case err != nil:
		// Not completed (no usage), or completed and left to the settle
		// sweep (settle.ErrPending), which bills it once.
		return res, fmt.Errorf("video: %w", err)
	}
	return res, nil
}

// slideAsset upserts the slide asset of videoID and records it as exec's
// artifact, in one transaction, and returns its id.
func (v *Videos) slideAsset(ctx context.Context, exec jobguard.Execution, videoID string) (string, error) {
	assetID := videoID + "/slides"
	return assetID, pgx.BeginFunc(ctx, v.DB, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO assets (id, video_id, kind, job_id, generation)
			VALUES ($1, $2, 'slides', $3, $4)
			ON CONFLICT (id) DO UPDATE SET job_id = $3, generation = $4, status = 'PENDING'`,
			assetID, videoID, exec.JobID, exec.Generation); err != nil {
			return err
		}
		return v.Artifacts.Record(ctx, tx, exec, KindAsset, assetID)
	})
}

// undo compensates what exec made, and returns err joined with the
// compensation's error, if any.
func (v *Videos) undo(ctx context.Context, exec jobguard.Execution, err error) error {
	if _, cerr := v.Artifacts.CompensateExecution(ctx, exec); cerr != nil {
		return errors.Join(err, cerr)
	}
	return err
}

// encode writes the file under runCtx, the watcher's context, and
// heartbeats (under ctx) on every chunk the encoder reports. A Lost beat
// stops the encode with an error wrapping ErrJobTerminal, and tells the
// watcher.
func (v *Videos) encode(ctx, runCtx context.Context, exec jobguard.Execution, path string) (sim.Encoded, error) {
	f, err := os.Create(path)
	if err != nil {
		return sim.Encoded{}, err
	}
	enc, err := v.Encoder.Encode(runCtx, f, func(percent int) error {
		res, err := v.Heartbeat.Beat(ctx, v.DB, exec, heartbeat.Progress(percent))
		switch res {
		case heartbeat.Lost:
			if v.Watcher != nil {
				v.Watcher.Lost(ctx, exec, err)
			}
			return err
		case heartbeat.Failed:
			// A heartbeat that could not be written is not a reason to stop.
			v.log().WarnContext(ctx, "video: heartbeat not written", "job_id", exec.JobID, "error", err)
		}
		return nil
	})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return enc, err
}

// log returns the processor's logger.
func (v *Videos) log() *slog.Logger {
	if v.Log == nil {
		return slog.Default()
	}
	return v.Log
}

// exec1 runs a one-row update and fails when no row matched.
func exec1(ctx context.Context, db jobguard.DB, sql string, args ...any) error {
	tag, err := db.Exec(ctx, sql, args...)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return errors.New("no row matched")
	}
	return nil
}
