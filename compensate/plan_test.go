package compensate_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
)

// Keeping an execution's artifacts reaches them through the unique key of
// their execution, never through the index of the open artifacts, under
// custom and generic plans, before the table was analyzed and after: that
// index leads with the jobs table and the state, so a scan of it reads
// every pending artifact of the jobs table to find the execution's own,
// and each completion would cost what the backlog does.
func TestKeep_ReachesTheExecutionsArtifactsByTheirKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.env.Exec(`INSERT INTO job_artifacts (jobs_table, job_id, generation, kind, ref, state)
		SELECT $1, g::text, 1, 'file', 'r' || g, (ARRAY['pending', 'kept', 'done'])[g % 3 + 1]
		FROM generate_series(1, 30000) AS g`, b.jobs.Guard.TableKey())
	keep := map[string][2]string{"keep": {compensate.KeepSQL(b.arts), `'3000', 1, now()`}}
	b.env.Plans("job_artifacts", keep, func(label, plan string) {
		require.NotRegexp(t, `Rows Removed by Filter: [1-9]`, plan, "%s:\n%s", label, plan)
		require.NotContains(t, plan, "job_artifacts_open_idx", "%s:\n%s", label, plan)
	})
}
