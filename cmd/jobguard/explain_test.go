package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
)

// explainJSON is what explain --json prints, as a script reads it.
type explainJSON struct {
	ID             string   `json:"id"`
	Status         string   `json:"status"`
	Generation     *int64   `json:"generation"`
	Type           string   `json:"type"`
	LimitSeconds   *float64 `json:"limit_seconds"`
	RuntimeSeconds *float64 `json:"runtime_seconds"`
	StalledSeconds *float64 `json:"stalled_for_seconds"`
	Marker         *struct {
		Generation int64  `json:"generation"`
		Reason     string `json:"reason"`
	} `json:"marker"`
	StartGuard string `json:"start_guard"`
	Decision   string `json:"decision"`
	Why        string `json:"why"`
}

// On a Prisma-style table mapped by a config file, explain says a stuck
// job would be reclaimed, a beating one kept, and why, with the row, the
// limit and the start guard's answer; --json says the same to a script.
func TestExplain_SaysWhatASweepWouldDoAndWhy(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Prisma)
	stuck := b.jobs.Insert(t, fixture.Job{Generation: 3, UpdatedAgo: 2 * time.Hour})
	alive := b.jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
	b.jobs.Backdate(t, alive, "updatedAt", 2*time.Minute)
	untyped := b.jobs.Insert(t, fixture.Job{Type: "video", UpdatedAgo: 2 * time.Hour})

	config := filepath.Join(t.TempDir(), "jobguard.json")
	require.NoError(t, os.WriteFile(config, []byte(fmt.Sprintf(`{
  "table": {"schema": %q, "name": "CourseJob", "updated_at_column": "updatedAt",
            "failure_reason_column": "failureReason", "generation_column": "generation", "type_column": "kind",
            "parent_id_column": "courseId", "started_at_column": "startedAt"},
  "shared": {"prefix": %q}
}`, b.env.Schema, b.env.Prefix)), 0o600))
	explain := func(id string, extra ...string) result {
		return jg(t, append([]string{"explain", id, "--config", config, "--database-url", b.env.DatabaseURL,
			"--redis-url", b.env.RedisURL}, extra...)...)
	}

	r := explain(stuck)
	require.Equal(t, 0, r.code, r)
	for _, want := range []string{
		`(?m)^job +` + stuck + `$`,
		`(?m)^table +"` + b.env.Schema + `"\."CourseJob"$`,
		`(?m)^status +PROCESSING$`,
		`(?m)^generation +3$`,
		`(?m)^type +chapter$`,
		`(?m)^started +\d{4}-\d\d-\d\dT[\d:]+Z \(2h0m\d+s ago\)$`,
		`(?m)^last progress +\S+ \(2h0m\d+s ago\)$`,
		`(?m)^failure reason +-$`,
		`(?m)^limit +30m0s \(type "chapter", ` + b.env.Schema + `\.job_type_limits\)$`,
		`(?m)^marker +none$`,
		`(?m)^start guard +allows: no reclaim recorded`,
		`(?m)^decision +reclaim$`,
		`(?m)^why +runtime 2h0m\d+s > limit 30m0s and no progress for 2h0m\d+s \(threshold 15m0s\): reclaim$`,
	} {
		require.Regexp(t, want, r.stdout)
	}

	r = explain(alive, "--json")
	require.Equal(t, 0, r.code, r)
	var e explainJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &e), r)
	require.Equal(t, alive, e.ID)
	require.Equal(t, "progressing", e.Decision)
	require.EqualValues(t, 1, *e.Generation)
	require.EqualValues(t, 1800, *e.LimitSeconds)
	require.InDelta(t, 120, *e.StalledSeconds, 30)
	require.InDelta(t, 7200, *e.RuntimeSeconds, 30)
	require.Regexp(t, `^runtime 2h0m\d+s > limit 30m0s, but progress 2m\d+s ago \(threshold 15m0s\): kept as progressing$`, e.Why)
	require.Equal(t, "allows", e.StartGuard)

	// Give explain the reclaimer's threshold, and its answer follows.
	r = explain(alive, "--json", "--no-progress", "1m")
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &e), r)
	require.Equal(t, "reclaim", e.Decision)

	r = explain(untyped)
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^limit +none: type "video" has no row in `, r.stdout)
	require.Regexp(t, `(?m)^why +type "video" has no limit: never reclaimed$`, r.stdout)
}

// A reclaimed job shows its marker and reason, and the start guard's
// refusal; a job that is not running is left alone, in words.
func TestExplain_ShowsTheMarkerAndTheStartGuardsRefusal(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	reason := jobguard.ReclaimedReasonDefault
	id := b.jobs.Insert(t, fixture.Job{Status: "FAILED", Generation: 4, Reason: reason})
	guard := b.jobs.GuardWith(t, jobguard.Shared{})
	markers, err := marker.NewRedisStore(guard, b.env.Redis, marker.Config{})
	require.NoError(t, err)
	require.NoError(t, markers.Write(context.Background(), marker.Marker{JobID: id, Generation: 4, Reason: reason, At: time.Now()}))

	r := b.run(t, "explain", id)
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^marker +generation 4, "`+reason+`", written \S+ \(key `+regexp.QuoteMeta(markers.Key(id))+`\)$`, r.stdout)
	require.Contains(t, markers.Key(id), b.env.Prefix+":reclaimed:{"+id+"}:", "the key names the job, then its table")
	require.Regexp(t, `(?m)^start guard +refuses: reclaimed, says the database`, r.stdout)
	require.Regexp(t, `(?m)^failure reason +`+reason+`$`, r.stdout)
	require.Regexp(t, `(?m)^decision +reclaimed$`, r.stdout)
	require.Regexp(t, `(?m)^why +FAILED at \S+Z \(\S+ ago\), reclaimed by a sweep: failure reason "`+reason+`", marker of generation 4; `+
		`no sweep touches it again \('jobguard retry' runs it again\)$`, r.stdout)

	r = b.run(t, "explain", id, "--json")
	var e explainJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &e), r)
	require.NotNil(t, e.Marker)
	require.EqualValues(t, 4, e.Marker.Generation)
	require.Equal(t, "refuses", e.StartGuard)
}

// An id with no row exits 3; an id the id column cannot hold exits 2;
// both say so.
func TestExplain_UnknownJobExits3AndMalformedIDExits2(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)

	missing := "7b0c4b8e-59a8-4a31-9d4f-2f1f3f6c5a11"
	r := b.run(t, "explain", missing)
	require.Equal(t, 3, r.code, r)
	require.Contains(t, r.stderr, "job "+missing+" not found in ")
	require.Contains(t, r.stderr, "check the id")
	require.Empty(t, r.stdout)

	r = b.run(t, "explain", "not-a-uuid")
	require.Equal(t, 2, r.code, r)
	require.Contains(t, r.stderr, `invalid job id: "not-a-uuid" is not a uuid (column "id" is uuid)`)

	r = b.run(t, "retry", "not-a-uuid")
	require.Equal(t, 2, r.code, r)
}

// A server that does not answer exits 1 and says which, and what to check.
func TestServers_UnreachableExit1AndSayWhatToCheck(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	id := b.jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})

	r := b.run(t, "explain", id, "--database-url", "postgres://postgres@"+closedPort+"/test?connect_timeout=5")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "cannot reach PostgreSQL at 127.0.0.1:1")
	require.Contains(t, r.stderr, "check that the server is up and that --database-url names it")

	// A live sweep checks Redis before it writes: the job stays as it was.
	r = b.run(t, "sweep", "--redis-url", "redis://"+closedPort+"/0")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "cannot reach Redis at 127.0.0.1:1")
	require.Equal(t, "PROCESSING", b.jobs.Read(t, id).Status)

	// explain prints what it could read, and says the marker is unknown.
	r = b.run(t, "explain", id, "--redis-url", "redis://"+closedPort+"/0")
	require.Equal(t, 1, r.code, r)
	require.Regexp(t, `(?m)^marker +cannot read: `, r.stdout)
	require.Regexp(t, `(?m)^decision +reclaim$`, r.stdout)
	require.Contains(t, r.stderr, "the reclaim marker could not be read from Redis at 127.0.0.1:1")

	// The URL may come from the environment instead of the flag.
	r = jgEnv(t, []string{envDatabaseURL + "=" + b.env.DatabaseURL, envRedisURL + "=" + b.env.RedisURL},
		"explain", id, "--schema", b.env.Schema, "--prefix", b.env.Prefix)
	require.Equal(t, 0, r.code, r)
}

// A mapping that does not match the table exits 1 with the library's
// error, which names the column, and says what to set.
func TestMapping_MismatchIsTheLibrarysClearError(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Prisma)
	id := b.jobs.Insert(t, fixture.Job{})

	r := b.run(t, "explain", id, "--updated-at-column", "updated_at")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, `has no column "updated_at" (UpdatedAtColumn)`)
	require.Contains(t, r.stderr, "the table mapping does not match the table")

	r = b.run(t, "sweep", "--dry-run", "--table", "Jobs")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, `table "`+b.env.Schema+`"."Jobs" does not exist`)

	// Without a start column, the table cannot say how long a job ran.
	r = b.run(t, "sweep", "--dry-run", "--started-at-column=")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "has no StartedAtColumn")
	require.Contains(t, r.stderr, "--started-at-column")

	// A missing limits table says how to create it.
	r = b.run(t, "limits list", "--limits-table", "limits")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "the limits table "+b.env.Schema+".limits does not exist")
}

// A job that is no longer running says so plainly, whatever its type:
// FAILED, by whom (a sweep's reclaim, told by the failure reason or the
// marker, or its own execution), and when; or COMPLETED, and when. Never
// that its type has no limit, or that the row is "not active".
func TestExplain_AFinishedJobSaysWhatBecameOfItByWhomAndWhen(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	ctx := context.Background()
	reason := jobguard.ReclaimedReasonDefault
	guard := b.jobs.GuardWith(t, jobguard.Shared{})
	markers, err := marker.NewRedisStore(guard, b.env.Redis, marker.Config{})
	require.NoError(t, err)
	mark := func(id string, gen int64) {
		require.NoError(t, markers.Write(ctx, marker.Marker{JobID: id, Generation: gen, Reason: reason, At: time.Now()}))
	}
	reclaimed := b.jobs.Insert(t, fixture.Job{Status: "FAILED", Generation: 2, Reason: reason, UpdatedAgo: 3 * time.Hour})
	unlimited := b.jobs.Insert(t, fixture.Job{Type: "video", Status: "FAILED", Generation: 2, Reason: reason, UpdatedAgo: 3 * time.Hour})
	overwritten := b.jobs.Insert(t, fixture.Job{Status: "FAILED", Generation: 5, Reason: "late worker: model timeout", UpdatedAgo: 3 * time.Hour})
	mark(overwritten, 5)
	failed := b.jobs.Insert(t, fixture.Job{Type: "video", Status: "FAILED", Generation: 1, Reason: "model timeout", UpdatedAgo: 3 * time.Hour})
	completed := b.jobs.Insert(t, fixture.Job{Type: "video", Status: "COMPLETED", Generation: 1, UpdatedAgo: 3 * time.Hour})

	ago := `at \d{4}-\d\d-\d\dT[\d:]+Z \(3h0m\d+s ago\)`
	for _, c := range []struct {
		id, decision, why string
	}{
		{reclaimed, "reclaimed", `^FAILED ` + ago + `, reclaimed by a sweep: failure reason "` + reason + `"; `},
		{unlimited, "reclaimed", `^FAILED ` + ago + `, reclaimed by a sweep: failure reason "` + reason + `"; `},
		{overwritten, "reclaimed", `^FAILED ` + ago + `, reclaimed by a sweep: marker of generation 5 ` +
			`\(the failure reason "late worker: model timeout" was written after\); `},
		{failed, "failed", `^FAILED ` + ago + `, by its own execution or an operator, not by a sweep: failure reason "model timeout"; `},
		{completed, "completed", `^COMPLETED ` + ago + `: finished; no sweep touches it`},
	} {
		r := b.run(t, "explain", c.id)
		require.Equal(t, 0, r.code, r)
		require.Regexp(t, `(?m)^decision +`+c.decision+`$`, r.stdout)
		require.NotContains(t, r.stdout, "never reclaimed")
		require.NotContains(t, r.stdout, "not_active")
		var why string
		for _, line := range strings.Split(r.stdout, "\n") {
			if rest, ok := strings.CutPrefix(line, "why"); ok {
				why = strings.TrimSpace(rest)
			}
		}
		require.Regexp(t, c.why, why, r)

		r = b.run(t, "explain", c.id, "--json")
		require.Equal(t, 0, r.code, r)
		var e explainJSON
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &e), r)
		require.Equal(t, c.decision, e.Decision)
		require.Regexp(t, c.why, e.Why)
	}
}

// A PROCESSING row without a start time is never listed by the table
// source: explain says so, that no sweep will reclaim it, and how many
// such rows the table holds, which every sweep counts as no_start_time.
func TestExplain_ARunningJobWithoutAStartSaysNoSweepListsIt(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	var ids []string
	for range 3 {
		id := b.jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
		b.env.Exec(`UPDATE jobs SET started_at = NULL WHERE id = $1`, id)
		ids = append(ids, id)
	}
	started := b.jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})

	r := b.run(t, "explain", ids[0])
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^decision +no_start_time$`, r.stdout)
	require.Regexp(t, `(?m)^why +its row has no start time: the table source never lists it, so no sweep reclaims it; `+
		`every sweep counts it as no_start_time`, r.stdout)
	require.Regexp(t, `(?m)^unstarted +3 running jobs in the table have no start time: never listed, never reclaimed, `+
		`counted by every sweep as no_start_time$`, r.stdout)

	r = b.run(t, "explain", started)
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^decision +reclaim$`, r.stdout)
	require.Regexp(t, `(?m)^unstarted +3 running jobs in the table have no start time`, r.stdout)

	r = b.run(t, "sweep", "--dry-run")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "3 running jobs have no start time and are not listed: never reclaimed")

	r = b.run(t, "sweep", "--json")
	require.Equal(t, 0, r.code, r)
	var rep struct {
		NoStartTime int `json:"no_start_time"`
		Reclaimed   int `json:"reclaimed"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r)
	require.Equal(t, 3, rep.NoStartTime)
	require.Equal(t, 1, rep.Reclaimed)
}
