package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
)

// limits set stores a limit, limits list shows it; --json parses.
func TestLimits_SetThenList(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)

	r := b.run(t, "limits set", "video", "1h30m")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, `Limit of "video": none -> 1h30m0s in `+b.env.Schema+".job_type_limits")
	r = b.run(t, "limits set", "chapter", "45m", "--json")
	require.Equal(t, 0, r.code, r)
	require.JSONEq(t, `{"type": "chapter", "limit_seconds": 2700, "previous_seconds": 1800}`, r.stdout)

	r = b.run(t, "limits list")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^TYPE +LIMIT\nchapter +45m0s\nvideo +1h30m0s\n$`, r.stdout)
	r = b.run(t, "limits list", "--json")
	require.Equal(t, 0, r.code, r)
	require.JSONEq(t, `[{"type": "chapter", "limit": "45m0s", "limit_seconds": 2700},
		{"type": "video", "limit": "1h30m0s", "limit_seconds": 5400}]`, r.stdout)

	r = b.run(t, "limits set", "video", "0s")
	require.Equal(t, 2, r.code, r)
}

// limits suggest reads the completions' runtimes, prints per type what a
// suggestion rests on and writes nothing; --apply sets the suggestions.
func TestLimits_SuggestThenApply(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	// A hundred chapters that ran 1 to 100 minutes, one reclaimed, and a
	// running video job, of a type that never finished.
	b.env.Exec(`INSERT INTO jobs (type, status, started_at, updated_at)
		SELECT 'chapter', 'COMPLETED', now() - interval '1 hour' - i * interval '1 minute', now() - interval '1 hour'
		FROM generate_series(1, 100) AS i`)
	b.env.Exec(`INSERT INTO jobs (type, status, failure_reason, started_at, updated_at)
		VALUES ('chapter', 'FAILED', 'reclaimed: exceeded runtime limit without progress', now() - interval '3 hours', now() - interval '2 hours')`)
	b.jobs.Insert(t, fixture.Job{Type: "video", UpdatedAgo: time.Minute})

	r := b.run(t, "limits suggest")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^TYPE +COMPLETED +P50 +P90 +P99 +MAX +OVER LIMIT +RECLAIMED +LIMIT +SUGGESTED$`, r.stdout)
	// p99 = 99.01 minutes; × 1.5 = 148.515 minutes, rounded up to the second.
	require.Regexp(t, `(?m)^chapter +100 +50m30s +1h30m6s +1h39m1s +1h40m0s +70 +1 +30m0s +2h28m31s$`, r.stdout)
	require.Regexp(t, `(?m)^video +0 +- +- +- +- +0 +0 +none +- \(no completion\)$`, r.stdout)
	require.Contains(t, r.stdout, "Suggestions only: nothing was written.")
	list := b.run(t, "limits list", "--json")
	require.JSONEq(t, `[{"type": "chapter", "limit": "30m0s", "limit_seconds": 1800}]`, list.stdout)

	r = b.run(t, "limits suggest", "--percentile", "0.5", "--margin", "1", "--below-longest", "--types", "chapter", "--json")
	require.Equal(t, 0, r.code, r)
	var sugs []struct {
		Type             string   `json:"type"`
		Completed        int      `json:"completed"`
		SuggestedSeconds *float64 `json:"suggested_seconds"`
		Applied          bool     `json:"applied"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &sugs), r)
	require.Len(t, sugs, 1)
	require.InDelta(t, 3030, *sugs[0].SuggestedSeconds, 1, "the median, 50.5 minutes")
	require.False(t, sugs[0].Applied)

	r = b.run(t, "limits suggest", "--apply")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "2h28m31s (applied)")
	list = b.run(t, "limits list", "--json")
	require.JSONEq(t, `[{"type": "chapter", "limit": "2h28m31s", "limit_seconds": 8911}]`, list.stdout,
		"a type without a suggestion keeps having no limit")

	r = b.run(t, "limits suggest", "--margin", "0.5")
	require.Equal(t, 2, r.code, r)
	require.Contains(t, r.stderr, "--margin 0.5: want 1 or more")
}

// Durations at the edges of the range, on every way in: a limit longer
// than the longest duration (a thousand years, the interval's maximum)
// lists as the longest and reclaims nothing; the longest duration a flag
// takes is accepted, one beyond it is refused with exit 2, by a flag and
// by the config file alike.
func TestLimits_DurationsAtTheEdgesOfTheRange(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	b.env.Exec(`INSERT INTO job_type_limits VALUES ('video', '1000 years'), ('export', '178000000 years')`)
	video := b.jobs.Insert(t, fixture.Job{Type: "video", Generation: 1, UpdatedAgo: 2 * time.Hour})
	b.jobs.Insert(t, fixture.Job{Type: "export", Generation: 1, UpdatedAgo: 2 * time.Hour})

	r := b.run(t, "limits list")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^export +2562047h47m16\.854775s \(the longest a limit can be: never reached\)$`, r.stdout)
	require.Regexp(t, `(?m)^video +2562047h47m16\.854775s \(the longest a limit can be: never reached\)$`, r.stdout)
	r = b.run(t, "explain", video)
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^decision +within_limit$`, r.stdout)
	r = b.run(t, "sweep", "--json")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, `"reclaimed": 0`)

	r = b.run(t, "limits set", "video", "2562047h47m16.854775807s")
	require.Equal(t, 0, r.code, r)
	r = b.run(t, "limits list", "--json")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, `"limit": "2562047h47m16.854775s"`)
	for _, bad := range []string{"2562048h", "1000y", "-1h", "0s", "999ns"} {
		r = b.run(t, "limits set", "video", "--", bad)
		require.Equal(t, 2, r.code, "%s: %s", bad, r)
		require.Contains(t, r.stderr, "2562047h", bad)
	}

	longest := "2562047h47m16.854775807s"
	config := writeConfig(t, `{"reclaim": {"interval": "`+longest+`"}}`)
	r = b.run(t, "sweep", "--config", config, "--sweep-timeout", longest, "--no-progress", longest, "--json")
	require.Equal(t, 0, r.code, r)
	for _, c := range []struct{ command, flag string }{
		{"sweep", "--sweep-timeout"}, {"sweep", "--no-progress"}, {"run", "--interval"}, {"run", "--sweep-timeout"},
	} {
		r = b.run(t, c.command, c.flag, "2562048h")
		require.Equal(t, 2, r.code, "%s %s: %s", c.command, c.flag, r)
		r = b.run(t, c.command, c.flag, "-1s")
		require.Equal(t, 2, r.code, "%s %s: %s", c.command, c.flag, r)
		require.Contains(t, r.stderr, c.flag+" -1s is negative")
	}
	for _, field := range []string{"no_progress", "interval", "sweep_timeout"} {
		config := writeConfig(t, `{"reclaim": {"`+field+`": "2562048h"}}`)
		r = b.run(t, "sweep", "--dry-run", "--config", config)
		require.Equal(t, 2, r.code, "%s: %s", field, r)
		require.Contains(t, r.stderr, "reclaim."+field)
		require.Contains(t, r.stderr, "at most "+longest)
	}
}

// On a first adoption (no limit set, no job running) limits suggest
// proposes a limit for every type with history, and warns, saying how
// many, when one rests on few completions; --json marks it tentative.
func TestLimits_SuggestOnAFirstAdoptionWarnsOfFewCompletions(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	b.env.Exec(`DELETE FROM job_type_limits`)
	b.env.Exec(`INSERT INTO jobs (type, status, started_at, updated_at)
		SELECT 'chapter', 'COMPLETED', now() - interval '1 hour' - i * interval '1 minute', now() - interval '1 hour'
		FROM generate_series(1, 100) AS i`)
	b.env.Exec(`INSERT INTO jobs (type, status, started_at, updated_at)
		SELECT 'video', 'COMPLETED', now() - interval '1 hour' - i * interval '1 hour', now() - interval '1 hour'
		FROM generate_series(1, 3) AS i`)

	r := b.run(t, "limits suggest")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^chapter +100 .* +none +2h28m31s$`, r.stdout)
	require.Regexp(t, `(?m)^video +3 .* +none +4h28m12s \(tentative\)$`, r.stdout)
	require.Contains(t, r.stdout, `Warning: the suggestion for "video" rests on 3 completions, fewer than 100`)
	require.NotContains(t, r.stdout, `for "chapter" rests on`)

	r = b.run(t, "limits suggest", "--json")
	require.Equal(t, 0, r.code, r)
	var sugs []struct {
		Type      string `json:"type"`
		Completed int    `json:"completed"`
		Tentative bool   `json:"tentative"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &sugs), r)
	require.Len(t, sugs, 2, r.stdout)
	require.False(t, sugs[0].Tentative)
	require.True(t, sugs[1].Tentative)

	r = b.run(t, "limits suggest", "--min-completions", "3")
	require.Equal(t, 0, r.code, r)
	require.NotContains(t, r.stdout, "Warning", r)
}

// A malformed --limits-table is a usage error (exit 2) in limits suggest
// whatever else is wrong with the settings: here, a mapping without the
// start column as well, which the limits table's name was read before.
func TestLimits_SuggestReportsAMalformedLimitsTableFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	long := strings.Repeat("x", 70)
	r := b.run(t, "limits suggest", "--started-at-column=", "--limits-table", long)
	require.Equal(t, 2, r.code, r)
	require.Contains(t, r.stderr, "is longer than 63 bytes")
}
