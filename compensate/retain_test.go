package compensate_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/plan"
)

// The retention sweep reads its own jobs table's finished artifacts
// through the finished index, even under a generic plan, and looks up a
// kept artifact's open siblings through the indexes of open artifacts:
// open artifacts, however old, and other tables' artifacts are not read.
func TestRetention_GenericPlanUsesTheFinishedIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.jobs.Guard.TableKey()
	ins := `INSERT INTO job_artifacts (jobs_table, job_id, generation, kind, ref, state, recheck_at, changed_at)
		SELECT %s FROM generate_series(1, %d) AS g`
	// Another table's finished artifacts, and this table's open ones, all old.
	b.env.Exec(fmt.Sprintf(ins, `'"s"."exports"', g::text, 1, 'file', 'x' || g, 'done', NULL, now() - interval '90 days'`, 20000))
	b.env.Exec(fmt.Sprintf(ins, `$1, 'p' || g, 1, 'file', 'p' || g, 'pending', NULL, now() - interval '90 days'`, 10000), key)
	b.env.Exec(fmt.Sprintf(ins, `$1, 'r' || g, 1, 'file', 'r' || g, 'rejected', NULL, now() - interval '90 days'`, 10000), key)
	// Finished ones, one a day: the done ones and the kept ones whose thing
	// no open artifact names go; a kept one whose thing an owed artifact
	// names stays.
	b.env.Exec(fmt.Sprintf(ins, `$1, 'd' || g, 1, 'file', 'd' || g, 'done', NULL, now() - interval '1 day' * g + interval '1 hour'`, 60), key)
	b.env.Exec(fmt.Sprintf(ins, `$1, 'k' || g, 1, 'file', 'k' || g, 'kept', NULL, now() - interval '1 day' * g + interval '1 hour'`, 60), key)
	b.env.Exec(fmt.Sprintf(ins, `$1, 'kr' || g, 2, 'file', 'r' || g, 'kept', NULL, now() - interval '90 days'`, 5), key)
	b.env.Exec(`ANALYZE job_artifacts`)

	p := plan.Generic(t, b.env.Pool, b.arts.Retention().RemoveSQL(), "2592000000000, 1000")
	require.Contains(t, p, "job_artifacts_finished_idx", p)
	require.Regexp(t, `Index Cond: \(\(jobs_table = '.*'::text\) AND \(changed_at < `, p)
	require.Contains(t, p, "job_artifacts_held_idx", p)
	require.Contains(t, p, "job_artifacts_open_ref_idx", p)
	require.NotRegexp(t, `Seq Scan`, p)
	require.Contains(t, p, "Delete on job_artifacts x (actual rows=60 ", p)
}
