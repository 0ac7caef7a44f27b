package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// retainJSON is what retain --json prints.
type retainJSON struct {
	DryRun bool `json:"dry_run"`
	Tables []struct {
		Table   string  `json:"table"`
		Age     string  `json:"age"`
		Removed int64   `json:"removed"`
		Oldest  *string `json:"oldest"`
		Skipped string  `json:"skipped"`
	} `json:"tables"`
}

// retain --dry-run counts what a run would remove and removes nothing; the
// run then removes exactly that, and an age of keep leaves its table alone.
func TestRetain_DryRunChangesNothingAndARunRemovesWhatItSaid(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	b.env.Exec(usage.Migration)
	b.env.Exec(settle.Migration)
	b.env.Exec(compensate.Migration)
	key := b.jobs.Guard.TableKey()
	b.env.Exec(`INSERT INTO job_settlements (jobs_table, job_id, generation, state, settled_at)
		SELECT $1, g::text, 1, CASE WHEN g % 2 = 0 THEN 'confirmed' ELSE 'pending' END, now() - interval '40 days'
		FROM generate_series(1, 10) AS g`, key)
	b.env.Exec(`INSERT INTO job_artifacts (jobs_table, job_id, generation, kind, ref, state, changed_at)
		VALUES ($1, '1', 1, 'file', 'a', 'done', now() - interval '40 days')`, key)
	b.env.Exec(`INSERT INTO job_reclaim_markers (jobs_table, job_id, generation, reason, reclaimed_at, expires_at)
		VALUES ($1, '1', 1, 'r', now() - interval '9 days', now() - interval '2 days'),
		       ($1, '2', 1, 'r', now(), now() + interval '7 days')`, key)
	counts := func() [3]int {
		var c [3]int
		for i, tbl := range []string{"job_settlements", "job_artifacts", "job_reclaim_markers"} {
			require.NoError(t, b.env.Pool.QueryRow(t.Context(), `SELECT count(*) FROM `+tbl).Scan(&c[i]))
		}
		return c
	}

	r := b.run(t, "retain", "--markers", "postgres", "--dry-run")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "Dry run: nothing was removed.")
	require.Regexp(t, `(?m)^job_settlements +720h0m0s +5 +\d{4}-`, r.stdout)
	require.Equal(t, [3]int{10, 1, 2}, counts(), "a dry run removes nothing")

	r = b.run(t, "retain", "--markers", "postgres", "--dry-run", "--json", "--artifacts-age", "keep")
	require.Equal(t, 0, r.code, r)
	var plan retainJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &plan), r)
	require.True(t, plan.DryRun)
	require.Len(t, plan.Tables, 3)
	require.EqualValues(t, []int64{5, 0, 1}, []int64{plan.Tables[0].Removed, plan.Tables[1].Removed, plan.Tables[2].Removed})
	require.Equal(t, "keep", plan.Tables[1].Age)
	require.NotNil(t, plan.Tables[0].Oldest)

	r = b.run(t, "retain", "--markers", "postgres", "--json", "--artifacts-age", "keep")
	require.Equal(t, 0, r.code, r)
	var rep retainJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r)
	require.False(t, rep.DryRun)
	require.EqualValues(t, []int64{5, 0, 1}, []int64{rep.Tables[0].Removed, rep.Tables[1].Removed, rep.Tables[2].Removed})
	require.Equal(t, [3]int{5, 1, 1}, counts())
}

// An age of 0 is refused, not read as keep or as now; a table that is not
// there is skipped and said so.
func TestRetain_AZeroAgeIsRefusedAndAMissingTableIsSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	r := b.run(t, "retain", "--records-age", "0")
	require.Equal(t, exitUsage, r.code, r)
	require.Contains(t, r.stderr, `"0": want a positive duration such as 720h, or keep`)

	r = b.run(t, "retain", "--dry-run")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^job_settlements +- +- +- +- +no such table \(settle is not in use\)$`, r.stdout)
	require.Contains(t, r.stdout, "markers are in Redis")
}
