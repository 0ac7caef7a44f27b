package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
)

func args(env *testenv.Env, extra ...string) []string {
	return append([]string{"-database", env.DatabaseURL, "-redis", env.RedisURL,
		"-schema", env.Schema, "-prefix", env.Prefix}, extra...)
}

func TestChapter_CompletesAndWritesTheWeeks(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	var out, errs bytes.Buffer
	code := run(context.Background(), args(env, "-course", "c1", "-weeks", "3", "-latency", "10ms"), &out, &errs)
	require.Equal(t, 0, code, errs.String())
	require.Contains(t, out.String(), "completed: c1 now has 3 week(s)")
	require.Contains(t, out.String(), "course c1: status READY, 3 week(s); chapter rows written by this job: 3")

	var lectures int
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM lectures`).Scan(&lectures))
	require.Equal(t, 3*2*2, lectures)
}

// With the watcher, the reclaim's notice cancels the hung model call: the
// command returns long before the call would have, and nothing is saved.
func TestChapter_HungModelCallIsReclaimedAndCancelled(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	var out, errs bytes.Buffer
	start := time.Now()
	code := run(context.Background(), args(env, "-course", "c2", "-latency", "0s", "-hang", "1m",
		"-limit", "500ms", "-no-progress", "500ms", "-interval", "100ms", "-reclaim"), &out, &errs)
	require.Equal(t, 0, code, errs.String())
	require.Less(t, time.Since(start), 30*time.Second, "the one-minute call was cancelled")
	require.Regexp(t, `refused: chapter: model call cancelled: watch: job \S+ generation 1 was reclaimed \(notice for generation 1\)`, out.String())
	require.Contains(t, out.String(), "course c2: status FAILED, 0 week(s); chapter rows written by this job: 0")
	require.Regexp(t, `msg="reclaim: sweep" scanned=\d+ reclaimed=1 `, errs.String())
	require.Contains(t, errs.String(), `msg="worker: job refused; not retried"`)
}

// Without notices the hung call runs to its end, and its save is refused by
// the conditional completion.
func TestChapter_HungModelCallIsReclaimedAndItsSaveRefused(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	var out, errs bytes.Buffer
	code := run(context.Background(), args(env, "-course", "c2", "-latency", "0s", "-hang", "2500ms",
		"-limit", "500ms", "-no-progress", "500ms", "-interval", "100ms", "-reclaim", "-notices", "off"), &out, &errs)
	require.Equal(t, 0, code, errs.String())
	require.Contains(t, out.String(), "refused: chapter: save: jobguard: job is terminal for this execution")
	require.Contains(t, out.String(), "course c2: status FAILED, 0 week(s); chapter rows written by this job: 0")
	require.Regexp(t, `msg="reclaim: sweep" scanned=\d+ reclaimed=1 `, errs.String())
	require.Contains(t, errs.String(), `msg="worker: job refused; not retried"`)
}
