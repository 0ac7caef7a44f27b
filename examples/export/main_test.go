package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
)

func args(env *testenv.Env, extra ...string) []string {
	return append([]string{"-database", env.DatabaseURL, "-redis", env.RedisURL,
		"-schema", env.Schema, "-prefix", env.Prefix}, extra...)
}

func TestExport_Completes(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	var out, errs bytes.Buffer
	code := run(context.Background(), args(env, "-document", "d1", "-latency", "10ms"), &out, &errs)
	require.Equal(t, 0, code, errs.String())
	require.Contains(t, out.String(), "completed: exports/d1-g1.pdf")
	require.Contains(t, out.String(), "document d1: status READY, export DONE")
}

func TestExport_ReclaimFailsTheExportAndKeepsTheSourceReady(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	var out, errs bytes.Buffer
	code := run(context.Background(), args(env, "-document", "d2", "-latency", "0s", "-hang", "2500ms",
		"-limit", "500ms", "-no-progress", "500ms", "-interval", "100ms", "-reclaim"), &out, &errs)
	require.Equal(t, 0, code, errs.String())
	require.Contains(t, out.String(), "refused: export: save: jobguard: job is terminal for this execution")
	require.Contains(t, out.String(), "document d2: status READY, export FAILED")
	require.Regexp(t, `msg="reclaim: sweep" scanned=\d+ reclaimed=1 `, errs.String())
}
