package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
)

// stallChapters inserts n running chapter jobs whose heartbeats stopped an
// hour ago, together.
func stallChapters(b *bundle, n int) {
	b.env.Exec(`INSERT INTO jobs (type, status, generation, started_at, updated_at)
		SELECT 'chapter', 'PROCESSING', 1, now() - interval '2 hours', now() - interval '1 hour' - i * interval '1 second'
		FROM generate_series(1, $1) AS i`, n)
}

func countFailed(t *testing.T, b *bundle) int {
	t.Helper()
	var n int
	require.NoError(t, b.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM jobs WHERE status = 'FAILED'`).Scan(&n))
	return n
}

// limits pause switches a type off, --shadow to shadow; list, explain and a
// sweep say so; resume switches it back and the next sweep reclaims.
func TestLimits_PauseResumeListExplain(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	stuck := b.jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
	table := b.env.Schema + ".job_type_limits"

	r := b.run(t, "limits pause", "chapter")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, `Type "chapter" paused (mode off) in `+table+`: no sweep reclaims its jobs until 'jobguard limits resume chapter'.`)
	r = b.run(t, "limits list")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^TYPE +LIMIT +MODE\nchapter +30m0s +off \(paused\)\n$`, r.stdout)
	r = b.run(t, "limits list", "--json")
	require.JSONEq(t, `[{"type": "chapter", "limit": "30m0s", "limit_seconds": 1800, "mode": "off"}]`, r.stdout)

	r = b.run(t, "explain", stuck)
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^mode +off: paused; no sweep reclaims its jobs \('jobguard limits resume chapter'\)$`, r.stdout)
	require.Contains(t, r.stdout, `type "chapter" is paused: left alone`)
	r = b.run(t, "explain", stuck, "--json")
	var e struct{ Mode string }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &e), r)
	require.Equal(t, "off", e.Mode)

	r = b.run(t, "sweep")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "Reclaimed nothing.")
	require.Regexp(t, `(?m)^paused +1$`, r.stdout)
	require.Equal(t, "PROCESSING", b.jobs.Read(t, stuck).Status)

	r = b.run(t, "limits pause", "chapter", "--shadow")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, `Type "chapter" in shadow (mode shadow) in `+table)
	r = b.run(t, "limits list")
	require.Regexp(t, `(?m)^chapter +30m0s +shadow \(counted, not written\)$`, r.stdout)
	r = b.run(t, "sweep", "--json")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, `"would_reclaim": 1`)
	require.Equal(t, "PROCESSING", b.jobs.Read(t, stuck).Status)

	r = b.run(t, "limits resume", "chapter")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, `Type "chapter" resumed (mode reclaim) in `+table)
	r = b.run(t, "limits list")
	require.Regexp(t, `(?m)^TYPE +LIMIT\nchapter +30m0s\n$`, r.stdout)
	r = b.run(t, "sweep")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "Reclaimed 1: "+stuck)

	r = b.run(t, "limits pause", "video")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "the type has no limit")
	r = b.run(t, "limits pause")
	require.Equal(t, 2, r.code, r)
}

// A braked sweep says so, with the jobs it held back and why; with
// --release-brake the next one reclaims the rest.
func TestSweep_ReleaseBrake(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	stallChapters(b, 30)

	r := b.run(t, "sweep", "--brake-max-jobs", "10")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "Reclaimed 10: ")
	require.Regexp(t, `(?m)^braked +20$`, r.stdout)
	require.Contains(t, r.stdout, "\nBraked: 20 jobs held back: ")
	require.Contains(t, r.stdout, `30 of 30 running jobs in all, more than the cap of 10. `+
		`Find what stalled them, then 'jobguard sweep --release-brake' reclaims them at once.`)
	require.Equal(t, 10, countFailed(t, b))

	r = b.run(t, "sweep", "--brake-max-jobs", "10", "--release-brake", "--json")
	require.Equal(t, 0, r.code, r)
	var rep struct {
		Reclaimed   int    `json:"reclaimed"`
		Braked      int    `json:"braked"`
		BrakeReason string `json:"brake_reason"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r)
	require.Equal(t, 20, rep.Reclaimed)
	require.Zero(t, rep.Braked)
	require.Empty(t, rep.BrakeReason)
	require.Equal(t, 30, countFailed(t, b))

	r = b.run(t, "sweep", "--brake-max-share", "1.5")
	require.Equal(t, 2, r.code, r)
}

// run takes the brake's caps as flags, and --release-brake releases it
// for its first sweep only.
func TestRun_BrakeFlags(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	stallChapters(b, 30)

	// The first sweep is braked; the ones after it go on a cap at a time.
	s := startService(t, b, "--brake-max-jobs", "10")
	line := s.logged("reclaim: sweep")
	require.Equal(t, "ERROR", line["level"], line)
	require.EqualValues(t, 10, line["reclaimed"], line)
	require.EqualValues(t, 20, line["braked"], line)
	code, _ := s.terminate()
	require.Equal(t, 0, code, s.logs.String())

	released := setup(t, fixture.Default)
	stallChapters(released, 30)
	s = startService(t, released, "--brake-max-jobs", "10", "--release-brake")
	line = s.logged("reclaim: sweep")
	require.EqualValues(t, 30, line["reclaimed"], line)
	require.Nil(t, line["braked"], line)
	code, _ = s.terminate()
	require.Equal(t, 0, code, s.logs.String())
	require.Equal(t, 30, countFailed(t, released))
}
