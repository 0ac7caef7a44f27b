package main

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
)

func args(env *testenv.Env, extra ...string) []string {
	return append([]string{"-database", env.DatabaseURL, "-redis", env.RedisURL,
		"-schema", env.Schema, "-prefix", env.Prefix}, extra...)
}

func TestRiver_WorkerCompletesTheJobAndWritesTheWeeks(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	var out, errs testenv.Logs
	code := run(context.Background(), args(env, "-course", "c1", "-weeks", "3", "-latency", "10ms"), &out, &errs)
	require.Equal(t, 0, code, errs.String())
	require.Contains(t, out.String(), "River job 1: completed\n")
	require.Regexp(t, `job [0-9a-f-]{36}: COMPLETED; River job 1: completed\n`, out.String())
	require.Contains(t, out.String(), "course c1: status READY, 3 week(s); chapter rows written by this job: 3")
	require.Contains(t, errs.String(), `msg="worker: job done"`)

	// River's own migrations made its tables in the examples' schema.
	var versions int
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM river_migration`).Scan(&versions))
	require.NotZero(t, versions)
}

func TestRiver_HungJobIsReclaimedThroughTheRiverSourceAndCancelled(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	var out, errs testenv.Logs
	code := run(context.Background(), args(env, "-course", "c2", "-latency", "0s", "-hang", "2500ms",
		"-limit", "500ms", "-no-progress", "500ms", "-interval", "100ms", "-reclaim", "-redeliver"), &out, &errs)
	require.Equal(t, 0, code, errs.String())
	o := out.String()
	// The reclaimer found the job among River's running jobs and failed its
	// row; the execution lost its job (the reclaim's notice cancelled the
	// model call, or its late save was refused), and the middleware told
	// River not to retry it.
	require.Regexp(t, `msg="reclaim: sweep" scanned=\d+ reclaimed=1 `, errs.String())
	require.Contains(t, errs.String(), `msg="riverguard: job refused by the guards; River cancels it"`)
	require.Regexp(t, `River job 1: cancelled \(not retried\): (JobCancelError: )?(watch: job [0-9a-f-]{36} generation 1 was reclaimed|chapter: )`, o)
	// River delivered the same job again, as after a rescue: the start guard
	// refused it in the middleware, before the worker, and River cancelled it
	// again.
	require.Regexp(t, `River job 1 redelivered: cancelled \(not retried\): (JobCancelError: )?riverguard: river job 1: jobguard: job was reclaimed`, o)
	require.Regexp(t, `job [0-9a-f-]{36}: FAILED: reclaimed: .*; River job 1: cancelled\n`, o)
	require.Contains(t, o, "course c2: status FAILED, 0 week(s); chapter rows written by this job: 0")
}

func TestRiver_WithoutNoticesTheLateSaveIsRefusedAndCancelled(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	var out, errs testenv.Logs
	code := run(context.Background(), args(env, "-course", "c3", "-latency", "0s", "-hang", "1500ms",
		"-limit", "300ms", "-no-progress", "300ms", "-interval", "100ms", "-reclaim", "-notices", "off"), &out, &errs)
	require.Equal(t, 0, code, errs.String())
	o := out.String()
	// No watcher: the model call ran to its end, and its save was refused,
	// the row being FAILED already; River was told not to retry the job.
	require.Regexp(t, `msg="reclaim: sweep" scanned=\d+ reclaimed=1 `, errs.String())
	require.Regexp(t, `River job 1: cancelled \(not retried\): (JobCancelError: )?chapter: save: `, o)
	require.Regexp(t, `job [0-9a-f-]{36}: FAILED: reclaimed: .*; River job 1: cancelled\n`, o)
	require.Contains(t, o, "course c3: status FAILED, 0 week(s); chapter rows written by this job: 0")
}

// The Go snippets of README.md are excerpts of main.go, so they compile and
// cannot drift from it.
func TestReadme_GoSnippetsAreExcerptsOfTheCode(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	code, err := os.ReadFile("main.go")
	require.NoError(t, err)
	space := regexp.MustCompile(`\s+`)
	norm := func(s string) string { return space.ReplaceAllString(strings.TrimSpace(s), " ") }
	snippets := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	require.NotEmpty(t, snippets)
	for _, s := range snippets {
		require.Contains(t, norm(string(code)), norm(s[1]), "README snippet is not in main.go")
	}
}
