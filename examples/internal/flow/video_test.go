package flow

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/examples/internal/sim"
	"github.com/jobguard/jobguard/heartbeat"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/watch"
)

// newVideos builds a video processor as a worker does, with a watcher and
// a heartbeat that writes every millisecond, over a video 'v' of account
// 'a'. Its Encoder is left for the test.
func newVideos(t *testing.T) *Videos {
	t.Helper()
	ctx := context.Background()
	cfg, conns := connect(t, testenv.New(t), "")
	guard, err := jobguard.NewWithConfig(ctx, conns.Pool, jobguard.DefaultTable(), jobguard.GuardConfig{Shared: cfg.Shared()})
	require.NoError(t, err)
	starts, err := jobguard.NewStartGuard(guard, conns.Redis, jobguard.StartGuardConfig{})
	require.NoError(t, err)
	artifacts, err := compensate.New(ctx, compensate.Config{Guard: guard, DB: conns.Pool, Compensators: Compensators()})
	require.NoError(t, err)
	settler, err := settle.New(ctx, settle.Config{Guard: guard, DB: conns.Pool,
		Handlers: VideoHandlers(conns.Pool, nil), Increments: VideoIncrements()})
	require.NoError(t, err)
	tr, _ := conns.Transport()
	watcher, err := watch.New(watch.Config{Guard: guard, DB: conns.Pool, Transport: tr})
	require.NoError(t, err)
	require.NoError(t, conns.RunWatcher(ctx, watcher))
	_, err = conns.Pool.Exec(ctx, `INSERT INTO accounts (id) VALUES ('a');
		INSERT INTO videos (id, account_id, title) VALUES ('v', 'a', 'V')`)
	require.NoError(t, err)
	return &Videos{Guard: guard, Starts: starts, DB: conns.Pool,
		Heartbeat: heartbeat.New(guard, heartbeat.Config{Interval: time.Millisecond}),
		Watcher:   watcher, Artifacts: artifacts, Settler: settler, FilesDir: t.TempDir()}
}

// processHeld runs a video job whose encoder stops at its mux; hold runs
// while it waits there.
func processHeld(t *testing.T, v *Videos, steps int, hold func(jobID string)) (VideoResult, error) {
	t.Helper()
	ctx := context.Background()
	jobID, err := EnqueueVideo(ctx, v.DB, "v")
	require.NoError(t, err)
	mux := sim.NewGate()
	videos := *v
	videos.Encoder = sim.Encoder{Steps: steps, Hang: mux}
	type result struct {
		res VideoResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := videos.Process(ctx, jobID)
		done <- result{res, err}
	}()
	select {
	case <-mux.Reached():
		hold(jobID)
		mux.Release()
	case r := <-done:
		return r.res, r.err
	}
	r := <-done
	return r.res, r.err
}

func requireUndone(t *testing.T, v *Videos, res VideoResult) {
	t.Helper()
	_, err := os.Stat(res.File)
	require.ErrorIs(t, err, fs.ErrNotExist, "the file was compensated")
	var assets, ledger int
	require.NoError(t, v.DB.QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM assets), (SELECT count(*) FROM usage_ledger)`).Scan(&assets, &ledger))
	require.Zero(t, assets)
	require.Zero(t, ledger)
}

func TestVideos_DeletedBeforeFinalizeFailsTheJobAndUndoesItsWork(t *testing.T) {
	t.Parallel()
	v := newVideos(t)
	res, err := processHeld(t, v, 2, func(string) {
		_, err := v.DB.Exec(context.Background(), `UPDATE videos SET status = 'DELETED' WHERE id = 'v'`)
		require.NoError(t, err)
	})
	require.ErrorIs(t, err, jobguard.ErrStopped)
	var status string
	require.NoError(t, v.DB.QueryRow(context.Background(), `SELECT status FROM jobs`).Scan(&status))
	require.Equal(t, "FAILED", status)
	// The asset is upserted after the mux, and the re-check runs after it.
	requireUndone(t, v, res)
}

func TestVideos_LostHeartbeatStopsTheEncodeAndUndoesTheFile(t *testing.T) {
	t.Parallel()
	v := newVideos(t)
	ctx := context.Background()
	jobID, err := EnqueueVideo(ctx, v.DB, "v")
	require.NoError(t, err)
	var res VideoResult
	videos := *v
	videos.Encoder = sim.Encoder{Steps: 1000, StepDelay: time.Millisecond}
	done := make(chan error, 1)
	go func() {
		var err error
		res, err = videos.Process(ctx, jobID)
		done <- err
	}()
	// Once the encode has made progress, fail the job behind its back, as a
	// reclaimer would.
	require.Eventually(t, func() bool {
		tag, err := v.DB.Exec(ctx, `UPDATE jobs SET status = 'FAILED' WHERE id = $1 AND progress > 0`, jobID)
		return err == nil && tag.RowsAffected() == 1
	}, testenv.Patience, 5*time.Millisecond)
	err = <-done
	require.True(t, errors.Is(err, jobguard.ErrJobTerminal), "%v", err)
	// No notice was sent: the lost heartbeat told the watcher, which
	// cancelled the encode's context.
	var lost *watch.LostError
	require.ErrorAs(t, err, &lost)
	require.Equal(t, watch.ViaHeartbeat, lost.Via)
	requireUndone(t, v, res)
}
