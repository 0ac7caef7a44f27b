package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard/marker"
)

func TestMain(m *testing.M) {
	runWorkerIfAsked() // the worker process scene 6 starts from this binary
	os.Exit(m.Run())
}

// invariantNumbers are the invariants the demo checks, by the numbers its
// invariant lines print.
var invariantNumbers = []int{1, 2, 3, 4, 5, 6, 10}

func TestDemo_TellsTheStoryAndEveryInvariantHolds(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	code := run(context.Background(), nil, &out, &out)
	text := out.String()
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("\n" + text)
		}
	})
	require.Equal(t, 0, code)
	for _, i := range invariantNumbers {
		require.Regexp(t, regexp.MustCompile(fmt.Sprintf(`(?m)^  invariant %-2d HELD `, i)), text)
	}
	for _, scene := range []string{"Scenes 1 and 2:", "Scene 3:", "Scene 4:", "Scene 5:", "Scene 6:", "Final rows"} {
		require.Contains(t, text, scene)
	}
	require.NotContains(t, text, "UNEXPECTED")
	require.NotContains(t, text, "BROKEN")
	require.Contains(t, text, "Every invariant held.")
	// The story's key lines, computed at run time.
	require.Regexp(t, `model call of job \w+ cancelled: chapter: model call cancelled: watch: job \S+ generation 1 was reclaimed \(notice for generation 1\)`, text)
	require.Contains(t, text, "save refused: chapter: save: jobguard: job is terminal for this execution")
	require.Regexp(t, `encode cancelled: video: encode cancelled: watch: job \S+ generation 1 was reclaimed \(notice for generation 1\)`, text)
	require.Contains(t, text, "start refused: video: jobguard: job was reclaimed")
	require.Regexp(t, `reclaimer sweep: scanned 3, reclaimed 2 \[\w+ \w+\], progressing 1`, text)
	require.Contains(t, text, "log INFO  watch: execution lost its job; its context is cancelled")
	require.Regexp(t, `worker process \d+ was killed \(signal: killed\) after its completion committed`, text)
	require.Contains(t, text, "settle sweep: taken 1, settled 1, updates run 3, usage rows written 1, given up 0")
	require.Regexp(t, `invariant 10 HELD .*\n\s+3 completed video finalizes: 3 confirmed and billed once \(1 of them by the settle sweep after their worker died\)`, text)
}

func TestDemo_RejectsUnknownFlags(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.Equal(t, 2, run(context.Background(), []string{"-nope"}, &out, &out))
}

// The invariant lines are computed, not printed: each breaks when the rows
// it reads are made to break it, and holds again once they are restored.
func TestDemo_InvariantChecksSeeViolations(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	d, closeDemo, err := open(ctx, &out, false)
	require.NoError(t, err)
	t.Cleanup(func() { closeDemo(false) })
	require.NoError(t, d.story(ctx))
	pool := d.w.pool

	var chapterJob, healthyJob, videoJob string
	require.NoError(t, pool.QueryRow(ctx, `SELECT id::text FROM jobs WHERE parent_id = 'course-1'`).Scan(&chapterJob))
	require.NoError(t, pool.QueryRow(ctx, `SELECT id::text FROM jobs WHERE parent_id = 'course-2'`).Scan(&healthyJob))
	require.NoError(t, pool.QueryRow(ctx, `SELECT id::text FROM jobs WHERE parent_id = 'video-1'`).Scan(&videoJob))
	var lastSeq int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT max(seq) FROM job_transitions`).Scan(&lastSeq))
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	saved := d.refusals

	violations := []struct {
		name        string
		spoil, mend func()
	}{
		{"a FAILED job completed without Retry",
			func() { exec(`UPDATE jobs SET status = 'COMPLETED' WHERE id = $1`, chapterJob) },
			func() {
				exec(`UPDATE jobs SET status = 'FAILED' WHERE id = $1`, chapterJob)
				exec(`DELETE FROM job_transitions WHERE seq > $1`, lastSeq)
			}},
		{"a course READY with no completed job",
			func() { exec(`UPDATE courses SET status = 'READY' WHERE id = 'course-1'`) },
			func() { exec(`UPDATE courses SET status = 'FAILED' WHERE id = 'course-1'`) }},
		{"usage billed for a reclaimed job",
			func() {
				exec(`INSERT INTO usage_ledger (jobs_table, job_id, meter, generation, account, quantity)
					VALUES ($2, $1, 'tokens', 1, 'acct-1', 5)`, chapterJob, d.w.guard.TableKey())
			},
			func() { exec(`DELETE FROM usage_ledger WHERE meter = 'tokens'`) }},
		{"a marker with no reclaim behind it",
			func() {
				require.NoError(t, d.w.starts.Markers().Write(ctx, marker.Marker{JobID: videoJob, Generation: 1, Reason: "stray"}))
			},
			func() { require.NoError(t, d.w.starts.Markers().Delete(ctx, videoJob)) }},
		{"a row written by an old generation",
			func() {
				exec(`INSERT INTO chapters (course_id, job_id, generation, week, title)
					VALUES ('course-2', $1, 0, 9, 'stale')`, healthyJob)
			},
			func() { exec(`DELETE FROM chapters WHERE title = 'stale'`) }},
		{"a refusal nobody was told about",
			func() { d.refusals = map[string][]error{} },
			func() { d.refusals = saved }},
		{"a completed finalize left unbilled",
			func() { exec(`UPDATE job_settlements SET state = 'pending' WHERE job_id = $1`, videoJob) },
			func() { exec(`UPDATE job_settlements SET state = 'confirmed' WHERE job_id = $1`, videoJob) }},
	}
	checks := d.checks()
	require.Len(t, checks, len(violations))
	for i, v := range violations {
		v.spoil()
		held, detail, err := checks[i].check(ctx)
		require.NoError(t, err)
		require.False(t, held, "invariant %d should see %s: %s", checks[i].num, v.name, detail)
		v.mend()
		held, detail, err = checks[i].check(ctx)
		require.NoError(t, err)
		require.True(t, held, "invariant %d after mending %s: %s", checks[i].num, v.name, detail)
	}
	held, err := d.invariants(ctx)
	require.NoError(t, err)
	require.True(t, held, out.String())
}

// The README's main command, as a user runs it: a built binary, no flags.
func TestDemo_Binary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "demo")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run())
	out, err := exec.Command(bin).CombinedOutput()
	require.NoError(t, err, string(out))
	for _, i := range invariantNumbers {
		require.Regexp(t, regexp.MustCompile(fmt.Sprintf(`(?m)^  invariant %-2d HELD `, i)), string(out))
	}
	require.Contains(t, string(out), "Every invariant held.")
}
