package flow

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/examples/internal/sim"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

func openEnv(t *testing.T) *Env {
	t.Helper()
	env := testenv.New(t)
	e, err := Open(context.Background(), Config{DatabaseURL: env.DatabaseURL, RedisURL: env.RedisURL,
		Schema: env.Schema, Prefix: env.Prefix, FilesDir: t.TempDir(), HeartbeatInterval: time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	_, err = e.Pool.Exec(context.Background(), `INSERT INTO accounts (id) VALUES ('a');
		INSERT INTO videos (id, account_id, title) VALUES ('v', 'a', 'V')`)
	require.NoError(t, err)
	return e
}

// processHeld runs a video job whose encoder stops at its mux; hold runs
// while it waits there.
func processHeld(t *testing.T, e *Env, steps int, hold func(jobID string)) (VideoResult, error) {
	t.Helper()
	ctx := context.Background()
	jobID, err := EnqueueVideo(ctx, e, "v")
	require.NoError(t, err)
	mux := sim.NewGate()
	videos := &Videos{Env: e, Encoder: sim.Encoder{Steps: steps, Hang: mux}}
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

func requireUndone(t *testing.T, e *Env, res VideoResult) {
	t.Helper()
	_, err := os.Stat(res.File)
	require.ErrorIs(t, err, fs.ErrNotExist, "the file was compensated")
	var assets, ledger int
	require.NoError(t, e.Pool.QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM assets), (SELECT count(*) FROM usage_ledger)`).Scan(&assets, &ledger))
	require.Zero(t, assets)
	require.Zero(t, ledger)
}

func TestVideos_DeletedBeforeFinalizeFailsTheJobAndUndoesItsWork(t *testing.T) {
	t.Parallel()
	e := openEnv(t)
	res, err := processHeld(t, e, 2, func(string) {
		_, err := e.Pool.Exec(context.Background(), `UPDATE videos SET status = 'DELETED' WHERE id = 'v'`)
		require.NoError(t, err)
	})
	require.ErrorIs(t, err, jobguard.ErrStopped)
	var status string
	require.NoError(t, e.Pool.QueryRow(context.Background(), `SELECT status FROM jobs`).Scan(&status))
	require.Equal(t, "FAILED", status)
	// The asset is upserted after the mux, and the re-check runs after it.
	requireUndone(t, e, res)
}

func TestVideos_LostHeartbeatStopsTheEncodeAndUndoesTheFile(t *testing.T) {
	t.Parallel()
	e := openEnv(t)
	ctx := context.Background()
	jobID, err := EnqueueVideo(ctx, e, "v")
	require.NoError(t, err)
	var res VideoResult
	videos := &Videos{Env: e, Encoder: sim.Encoder{Steps: 1000, StepDelay: time.Millisecond}}
	done := make(chan error, 1)
	go func() {
		var err error
		res, err = videos.Process(ctx, jobID)
		done <- err
	}()
	// Once the encode has made progress, fail the job behind its back, as a
	// reclaimer would.
	require.Eventually(t, func() bool {
		tag, err := e.Pool.Exec(ctx, `UPDATE jobs SET status = 'FAILED' WHERE id = $1 AND progress > 0`, jobID)
		return err == nil && tag.RowsAffected() == 1
	}, 10*time.Second, 5*time.Millisecond)
	err = <-done
	require.True(t, errors.Is(err, jobguard.ErrJobTerminal), "%v", err)
	// No notice was sent: the lost heartbeat told the watcher, which
	// cancelled the encode's context.
	var lost *watch.LostError
	require.ErrorAs(t, err, &lost)
	require.Equal(t, watch.ViaHeartbeat, lost.Via)
	requireUndone(t, e, res)
}
