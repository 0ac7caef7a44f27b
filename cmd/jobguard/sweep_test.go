package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
)

// sweepJSON is what sweep --json and sweep --dry-run --json print.
type sweepJSON struct {
	DryRun bool `json:"dry_run"`
	Jobs   []struct {
		ID       string `json:"id"`
		Decision string `json:"decision"`
		Why      string `json:"why"`
	} `json:"jobs"`
	Report struct {
		Scanned         int      `json:"scanned"`
		WouldReclaim    int      `json:"would_reclaim"`
		WouldReclaimIDs []string `json:"would_reclaim_ids"`
		Reclaimed       int      `json:"reclaimed"`
	} `json:"report"`
}

// hasMarker reports whether the job has a reclaim marker under the test's
// prefix, where the command's guard over the table looks.
func hasMarker(t *testing.T, b *bundle, id string) bool {
	t.Helper()
	g := b.jobs.GuardWith(t, jobguard.Shared{})
	markers, err := marker.NewRedisStore(g, b.env.Redis, marker.Config{})
	require.NoError(t, err)
	n, err := b.env.Redis.Exists(context.Background(), markers.Key(id)).Result()
	require.NoError(t, err)
	return n == 1
}

// sweep --dry-run prints each listed job with its decision and why, and
// writes nothing: no row of the jobs table (an audit trigger sees every
// write), no marker. The sweep after it does what the plan said.
func TestSweep_DryRunWritesNothingAndASweepDoesWhatItSaid(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Prisma)
	stuck := b.jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
	alive := b.jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
	b.jobs.Backdate(t, alive, "updatedAt", time.Minute)
	fresh := b.jobs.Insert(t, fixture.Job{UpdatedAgo: time.Minute})
	written := b.env.Audit(b.jobs.Table.QualifiedName())

	r := b.run(t, "sweep", "--dry-run")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^JOB +TYPE +RUNTIME +LIMIT +STALLED FOR +DECISION +WHY$`, r.stdout)
	require.Regexp(t, `(?m)^`+stuck+` +chapter +2h0m\d+s +30m0s +2h0m\d+s +reclaim +runtime 2h0m\d+s > limit 30m0s and no progress`, r.stdout)
	require.Regexp(t, `(?m)^`+alive+` +chapter +2h0m\d+s +30m0s +1m\d+s +progressing +runtime .*: kept as progressing$`, r.stdout)
	require.NotContains(t, r.stdout, fresh, "the table source lists only the jobs over their limit")
	require.Contains(t, r.stdout, "2 listed: 1 progressing, 1 reclaim. Dry run: nothing was written.")

	r = b.run(t, "sweep", "--dry-run", "--json")
	require.Equal(t, 0, r.code, r)
	var plan sweepJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &plan), r)
	require.True(t, plan.DryRun)
	require.Len(t, plan.Jobs, 2)
	require.Equal(t, []string{stuck}, plan.Report.WouldReclaimIDs)
	require.Zero(t, plan.Report.Reclaimed)

	require.Zero(t, written(), "a dry run writes no row")
	require.Equal(t, "PROCESSING", b.jobs.Read(t, stuck).Status)
	require.False(t, hasMarker(t, b, stuck), "a dry run writes no marker")

	r = b.run(t, "sweep", "--json")
	require.Equal(t, 0, r.code, r)
	var rep sweepJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep.Report), r)
	require.Equal(t, 1, rep.Report.Reclaimed)
	require.Equal(t, "FAILED", b.jobs.Read(t, stuck).Status)
	require.Equal(t, "PROCESSING", b.jobs.Read(t, alive).Status)
	require.True(t, hasMarker(t, b, stuck))
	require.Positive(t, written())

	r = b.run(t, "sweep")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "Reclaimed nothing.")
	require.Regexp(t, `(?m)^progressing +1$`, r.stdout)
}

// Parent rules from the config file run with a live sweep.
func TestSweep_RunsTheConfigsParentRules(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	b.env.Exec(`CREATE TABLE courses (id text PRIMARY KEY, status text NOT NULL)`)
	b.env.Exec(`INSERT INTO courses VALUES ('c1', 'GENERATING'), ('c2', 'READY')`)
	stuck := b.jobs.Insert(t, fixture.Job{ParentID: "c1", UpdatedAgo: 2 * time.Hour})
	done := b.jobs.Insert(t, fixture.Job{ParentID: "c2", UpdatedAgo: 2 * time.Hour})
	config := writeConfig(t, `{"parent_rules": {"chapter": {"table": "courses", "column": "status",
		"value": "FAILED", "from": ["GENERATING"]}}}`)

	r := b.run(t, "sweep", "--config", config)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "Reclaimed 2: ")
	for _, id := range []string{stuck, done} {
		require.Equal(t, "FAILED", b.jobs.Read(t, id).Status)
	}
	status := func(id string) string {
		var s string
		require.NoError(t, b.env.Pool.QueryRow(context.Background(), `SELECT status FROM courses WHERE id = $1`, id).Scan(&s))
		return s
	}
	require.Equal(t, "FAILED", status("c1"))
	require.Equal(t, "READY", status("c2"), "a parent moves only from the states the rule names")
}
