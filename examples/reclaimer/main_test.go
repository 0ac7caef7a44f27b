package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/examples/internal/flow"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
)

// args are the flags of a service over env's schema and prefix, with its
// metrics on a port of its own.
func args(env *testenv.Env, extra ...string) []string {
	return append([]string{"-database", env.DatabaseURL, "-redis", env.RedisURL,
		"-schema", env.Schema, "-prefix", env.Prefix, "-metrics-addr", "127.0.0.1:0"}, extra...)
}

// stuckChapterJob opens the examples' tables in env and starts a chapter
// job that will never finish.
func stuckChapterJob(t *testing.T, env *testenv.Env) (*worker, string) {
	t.Helper()
	ctx := context.Background()
	w := newWorker(t, env, "", nil)
	_, err := w.pool.Exec(ctx, `INSERT INTO courses (id, title) VALUES ('c1', 'Course')`)
	require.NoError(t, err)
	jobID, err := flow.EnqueueChapter(ctx, w.pool, "c1", 1)
	require.NoError(t, err)
	_, err = w.starts.Start(ctx, w.pool, jobID)
	require.NoError(t, err)
	return w, jobID
}

func waitStatus(t *testing.T, w *worker, jobID, want string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var status string
		err := w.pool.QueryRow(context.Background(), `SELECT status FROM jobs WHERE id = $1`, jobID).Scan(&status)
		return err == nil && status == want
	}, testenv.Patience, 50*time.Millisecond)
}

func TestReclaimer_ReclaimsStuckJobsLogsEachSweepAndStops(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	e, jobID := stuckChapterJob(t, env)

	ctx, cancel := context.WithCancel(context.Background())
	var logs testenv.Logs
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, args(env, "-interval", "100ms", "-no-progress", "300ms", "-limit", "chapter=300ms"), &logs)
	}()
	waitStatus(t, e, jobID, "FAILED")
	// Stop only after the reclaiming sweep's summary: its markers are
	// written after the commit, within the sweep.
	require.Eventually(t, func() bool {
		out := logs.String()
		return strings.Count(out, `msg="reclaim: sweep"`) >= 3 && strings.Contains(out, " reclaimed=1 ")
	}, testenv.Patience, 50*time.Millisecond)
	cancel()
	select {
	case code := <-done:
		require.Equal(t, 0, code, logs.String())
	case <-time.After(testenv.Patience):
		t.Fatal("the reclaimer did not stop after its context ended")
	}

	out := logs.String()
	require.Contains(t, out, `msg="reclaimer: started"`)
	require.Regexp(t, `msg="reclaim: sweep" scanned=\d+ reclaimed=1 `, out)
	require.Regexp(t, `level=INFO msg="reclaim: sweep" scanned=1 .*reclaimed=1`, out)
	require.Regexp(t, `level=INFO msg="reclaim: sweep" scanned=\d+ .*reclaimed=0 `, out,
		"a sweep that changes nothing still logs its line")
	require.True(t, strings.HasSuffix(strings.TrimSpace(out), `msg="reclaimer: stopped"`), out)

	var course string
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT status FROM courses WHERE id = 'c1'`).Scan(&course))
	require.Equal(t, "FAILED", course, "the chapter parent rule ran")
	m, found, err := e.starts.Markers().Read(context.Background(), jobID)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, int64(1), m.Generation)
}

func TestReclaimer_RejectsBadFlags(t *testing.T) {
	t.Parallel()
	for _, bad := range [][]string{{"-limit", "chapter"}, {"-limit", "chapter=-1s"}, {"-log-format", "xml"}, {"-log-level", "loud"}, {"-notices", "carrier-pigeon"}} {
		var logs bytes.Buffer
		require.Equal(t, 2, run(context.Background(), bad, &logs), "%v", bad)
	}
}

// The binary itself stops cleanly on SIGTERM, with the leader lock released
// so that another instance takes over.
func TestReclaimer_BinaryStopsOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	env := testenv.New(t)
	e, jobID := stuckChapterJob(t, env)
	bin := filepath.Join(t.TempDir(), "reclaimer")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run())

	var logs testenv.Logs
	cmd := exec.Command(bin, args(env, "-interval", "100ms", "-no-progress", "300ms", "-limit", "chapter=300ms", "-log-format", "json")...)
	cmd.Stderr = &logs
	require.NoError(t, cmd.Start())
	waitStatus(t, e, jobID, "FAILED")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), logs.String())
	require.Contains(t, logs.String(), `"msg":"reclaim: sweep"`)
	require.Contains(t, logs.String(), `"msg":"reclaimer: stopped"`)
}

// With -bullmq-queue the runtime comes from BullMQ's processedOn, not from
// the row's started_at. The test writes the queue's keys in BullMQ's own
// layout (the active list and the job hash); reclaim/bullmq is tested
// against queues that BullMQ itself wrote.
func TestReclaimer_WatchesABullMQQueue(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	e, jobID := stuckChapterJob(t, env)
	ctx := context.Background()
	prefix := env.Prefix + ":bull"
	started := time.Now().Add(-time.Minute).UnixMilli() // by the queue's clock
	// The row has no start of its own, so the table cannot say how long the
	// attempt has run: only the queue can.
	_, err := e.pool.Exec(ctx, `UPDATE jobs SET started_at = NULL WHERE id = $1`, jobID)
	require.NoError(t, err)
	require.NoError(t, env.Redis.RPush(ctx, prefix+":chapters:active", "42").Err())
	require.NoError(t, env.Redis.HSet(ctx, prefix+":chapters:42", "name", "chapter",
		"processedOn", started, "data", `{"rowId":"`+jobID+`"}`).Err())

	runCtx, cancel := context.WithCancel(ctx)
	var logs testenv.Logs
	done := make(chan int, 1)
	go func() {
		// By the queue the job has run for a minute, over its 30s limit.
		done <- run(runCtx, args(env, "-interval", "100ms", "-no-progress", "300ms", "-limit", "chapter=30s",
			"-bullmq-queue", "chapters", "-bullmq-prefix", prefix, "-bullmq-row-id-field", "rowId"), &logs)
	}()
	waitStatus(t, e, jobID, "FAILED")
	cancel()
	require.Equal(t, 0, <-done, logs.String())
	require.Contains(t, logs.String(), `bullmq_queue=chapters`)
}
