package marker_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/plan"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard/marker"
)

// The retention sweep reads the markers expired longer ago than its age
// through the expiry index, even under a generic plan: no live marker,
// and no marker expired more recently, is read.
func TestRetention_GenericPlanUsesTheExpiryIndex(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	store, err := marker.NewPostgresStore(jobs.NoRedis(t), marker.Config{})
	require.NoError(t, err)
	env.Exec(`INSERT INTO job_reclaim_markers (jobs_table, job_id, generation, reason, reclaimed_at, expires_at)
		SELECT '"s"."jobs"', g::text, 1, 'r', now(), now() + interval '7 days' FROM generate_series(1, 30000) AS g`)
	env.Exec(`INSERT INTO job_reclaim_markers (jobs_table, job_id, generation, reason, reclaimed_at, expires_at)
		SELECT '"s"."jobs"', 'e' || g, 1, 'r', now() - interval '7 days', now() - interval '1 hour' * g + interval '1 minute'
		FROM generate_series(1, 48) AS g`)
	env.Exec(`ANALYZE job_reclaim_markers`)

	// A day past expiry: markers 25..48 hours past theirs are removed.
	p := plan.Generic(t, env.Pool, store.Retention().RemoveSQL(), "86400000000, 1000")
	require.Contains(t, p, "job_reclaim_markers_expires_idx", p)
	require.Regexp(t, `Index Cond: \(expires_at < `, p)
	require.NotContains(t, p, "Rows Removed by Filter", "no marker but those removed is read:\n"+p)
	require.Contains(t, p, "Delete on job_reclaim_markers x (actual rows=24 ", p)
}
