package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
)

func args(t *testing.T, env *testenv.Env, extra ...string) []string {
	return append([]string{"-database", env.DatabaseURL, "-redis", env.RedisURL,
		"-schema", env.Schema, "-prefix", env.Prefix, "-files", t.TempDir()}, extra...)
}

func TestVideo_FinalizesAndBillsOnce(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	var out, errs bytes.Buffer
	code := run(context.Background(), args(t, env, "-video", "v1", "-steps", "5", "-step", "10ms", "-seconds", "42"), &out, &errs)
	require.Equal(t, 0, code, errs.String())
	require.Contains(t, out.String(), "finalize confirmed: true; usage accrued: true")
	require.Contains(t, out.String(), "video v1: status READY; asset rows: 1; usage rows of this job: 1; account acct-1 billed 42 s in all")
}

// A slow encode that keeps reporting progress outlives its limit: the
// reclaimer running beside it leaves it alone.
func TestVideo_ProgressingEncodeSurvivesTheReclaimer(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	var out, errs bytes.Buffer
	code := run(context.Background(), args(t, env, "-video", "v2", "-steps", "40", "-step", "50ms",
		"-limit", "300ms", "-no-progress", "1500ms", "-heartbeat", "100ms", "-interval", "100ms", "-reclaim"), &out, &errs)
	require.Equal(t, 0, code, errs.String())
	require.Contains(t, out.String(), "finalize confirmed: true; usage accrued: true")
	require.Contains(t, out.String(), "video v2: status READY")
	require.NotContains(t, errs.String(), "reclaim: job reclaimed")
}

// With the watcher, the reclaim's notice cancels the stalled mux: the file
// is compensated and no asset is ever written.
func TestVideo_ReclaimedMidEncodeIsCancelledAndCompensated(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	var out, errs bytes.Buffer
	start := time.Now()
	code := run(context.Background(), args(t, env, "-video", "v3", "-steps", "3", "-step", "10ms", "-hang", "1m",
		"-limit", "500ms", "-no-progress", "500ms", "-heartbeat", "100ms", "-interval", "100ms", "-reclaim"), &out, &errs)
	require.Equal(t, 0, code, errs.String())
	require.Less(t, time.Since(start), 30*time.Second, "the one-minute mux was cancelled")
	require.Regexp(t, `refused: video: encode cancelled: watch: job \S+ generation 1 was reclaimed \(notice for generation 1\)`, out.String())
	require.Contains(t, out.String(), "finalize rejected: false")
	require.Regexp(t, `file \S+ removed: true`, out.String())
	require.Contains(t, out.String(), "video v3: status FAILED; asset rows: 0; usage rows of this job: 0; account acct-1 billed 0 s in all")
}

// Without notices the stalled mux runs to its end, and the late finalize is
// rejected and compensated.
func TestVideo_ReclaimedMidEncodeIsRejectedAndCompensated(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	var out, errs bytes.Buffer
	code := run(context.Background(), args(t, env, "-video", "v3", "-steps", "3", "-step", "10ms", "-hang", "2500ms",
		"-limit", "500ms", "-no-progress", "500ms", "-heartbeat", "100ms", "-interval", "100ms", "-reclaim", "-notices", "off"), &out, &errs)
	require.Equal(t, 0, code, errs.String())
	require.Contains(t, out.String(), "refused: video: jobguard: job is terminal for this execution")
	require.Contains(t, out.String(), "finalize rejected: true")
	require.Regexp(t, `file \S+ removed: true`, out.String())
	require.Contains(t, out.String(), "video v3: status FAILED; asset rows: 0; usage rows of this job: 0; account acct-1 billed 0 s in all")
}
