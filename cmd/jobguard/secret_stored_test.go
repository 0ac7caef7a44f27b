package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
)

// storedSecrets are connection strings, with passwords the command is not
// given, in the spellings the textual rule reads: each stands in a text
// the command reads from the servers.
var storedSecrets = []string{
	"postgres://postgres:Zq71Pw@db.internal:5432/app",
	"host=db.internal password=Zq72Pw Zq72Px dbname=app",
	"redis://:Zq73Pw@cache.internal:6379/0",
	"host=db.internal\npassword =\nZq74Pw port=5432",
	"rediss://app:Zq75Pw\u00a0Zq75Px@cache.internal:6380/1",
}

// What the command prints of what it read from the database and Redis (a
// worker's failure reason, a marker's reason, a job's type and parent, a
// limit's type) may quote a connection string that it was never given: no
// command prints its password, in text or in JSON, whichever field brings
// it.
func TestSecrets_NoCommandPrintsAPasswordItRead(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	ctx := context.Background()
	reason := func(i int) string { return "load course: connect " + storedSecrets[i] + ": refused" }
	failed := []string{
		b.jobs.Insert(t, fixture.Job{Status: "FAILED", Reason: reason(0), Generation: 3, UpdatedAgo: time.Hour}),
		b.jobs.Insert(t, fixture.Job{Status: "FAILED", Reason: reason(1), Generation: 3, UpdatedAgo: time.Hour}),
	}
	markers, err := marker.NewRedisStore(b.jobs.GuardWith(t, jobguard.Shared{}), b.env.Redis, marker.Config{})
	require.NoError(t, err)
	for _, id := range failed {
		require.NoError(t, markers.Write(ctx, marker.Marker{JobID: id, Generation: 3, Reason: "reclaimed by " + storedSecrets[2], At: time.Now()}))
	}
	// A running job over its limit, of a type and under a parent that an
	// application filled from a connection string.
	typ := "export " + storedSecrets[3]
	b.env.Exec(`INSERT INTO job_type_limits VALUES ($1, interval '1 minute')`, typ)
	stalled := b.jobs.Insert(t, fixture.Job{Type: typ, ParentID: storedSecrets[4], Generation: 1, UpdatedAgo: 2 * time.Hour})

	lines := [][]string{
		{"explain", failed[0]},
		{"explain", "--json", failed[0]},
		{"explain", stalled},
		{"explain", "--json", stalled},
		{"sweep", "--dry-run"},
		{"sweep", "--dry-run", "--json"},
		{"limits list"},
		{"limits list", "--json"},
		{"limits suggest"},
		{"limits suggest", "--json"},
		{"retry", failed[0]},
		{"retry", "--json", failed[1]},
		{"sweep", "--json", "--log-format", "json", "--log-level", "debug"},
	}
	var runs []secretRun
	for _, line := range lines {
		r := b.run(t, line[0], line[1:]...)
		cmd := strings.Join(line, " ")
		require.Equal(t, exitOK, r.code, "jobguard %s\n%s", cmd, r)
		if line[len(line)-1] != "debug" && !strings.Contains(r.stdout, "xxxxx") {
			t.Errorf("jobguard %s does not print the field masked\n%s", cmd, r)
		}
		if slices.Contains(line, "--json") && !json.Valid([]byte(r.stdout)) {
			t.Errorf("jobguard %s prints no JSON\n%s", cmd, r)
		}
		runs = append(runs, secretRun{args: line, output: r.stdout + r.stderr, code: r.code})
	}
	requireNoLeak(t, runs)
}
