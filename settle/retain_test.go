package settle_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/plan"
)

// The retention sweep reads its own jobs table's settled records through
// the settled index, even under a generic plan: pending records, however
// old, and the records of the other tables that share the records table
// are not read.
func TestRetention_GenericPlanUsesTheSettledIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.jobs.Guard.TableKey()
	b.env.Exec(`INSERT INTO job_settlements (jobs_table, job_id, generation, state, settled_at, created_at)
		SELECT '"s"."exports"', g::text, 1, 'confirmed', now() - interval '90 days', now() - interval '90 days'
		FROM generate_series(1, 30000) AS g`)
	b.env.Exec(`INSERT INTO job_settlements (jobs_table, job_id, generation, created_at)
		SELECT $1, 'p' || g, 1, now() - interval '90 days' FROM generate_series(1, 20000) AS g`, key)
	b.env.Exec(`INSERT INTO job_settlements (jobs_table, job_id, generation, state, settled_at)
		SELECT $1, 'c' || g, 1, 'confirmed', now() - interval '1 day' * g + interval '1 hour' FROM generate_series(1, 60) AS g`, key)
	b.env.Exec(`ANALYZE job_settlements`)

	// 30 days: records 31..60 days old are removed.
	p := plan.Generic(t, b.env.Pool, b.s.Retention().RemoveSQL(), "2592000000000, 1000")
	require.Contains(t, p, "job_settlements_settled_idx", p)
	require.Regexp(t, `Index Cond: \(\(jobs_table = '.*'::text\) AND \(settled_at < `, p)
	require.NotContains(t, p, "Rows Removed by Filter", "no record but those removed is read:\n"+p)
	require.Contains(t, p, "rows=30 ", p)
	var left int
	require.NoError(t, b.env.Pool.QueryRow(t.Context(), `SELECT count(*) FROM job_settlements WHERE jobs_table = $1`, key).Scan(&left))
	require.Equal(t, 20060, left, "the plan's statement was rolled back")
}
