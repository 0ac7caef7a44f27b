package compensate_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
)

// An execution that made many things (the segments of an encode) owes
// them all when its completion is rejected, and CompensateExecution takes
// them one at a time, each after the id of the one before. Each step must
// read only what is still ahead of it: a step that reads the execution's
// owed artifacts again from the first, and drops those before its id,
// makes the drain of n artifacts read n²/2 rows (500,000 for 1,000, the
// most one CompensateExecution takes by default). Checked on the drain's
// last step, under custom and generic plans, before the table was
// analyzed and after.
func TestCompensateExecution_EachStepReadsOnlyTheArtifactsAheadOfIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.jobs.Guard.TableKey()
	// One execution (job 7, generation 1) with 1,000 owed artifacts, among
	// other executions' artifacts in every state.
	b.env.Exec(`INSERT INTO job_artifacts (jobs_table, job_id, generation, kind, ref, state)
		SELECT $1, '7', 1, 'file', 'segment-' || g, 'rejected' FROM generate_series(1, 1000) AS g`, key)
	b.env.Exec(`INSERT INTO job_artifacts (jobs_table, job_id, generation, kind, ref, state)
		SELECT $1, g::text, 1, 'file', 'r' || g, (ARRAY['rejected', 'kept', 'done'])[g % 3 + 1]
		FROM generate_series(100, 30000) AS g`, key)
	// The drain's last step comes after the execution's 999th artifact.
	var after int64
	require.NoError(t, b.env.Pool.QueryRow(context.Background(),
		`SELECT id FROM job_artifacts WHERE job_id = '7' AND generation = 1 ORDER BY id OFFSET 998 LIMIT 1`).Scan(&after))
	last := map[string][2]string{"last step": {compensate.OwedOfSQL(b.arts), strconv.FormatInt(after, 10) + `, '7', 1`}}
	b.env.Plans("job_artifacts", last, func(label, plan string) {
		require.NotRegexp(t, `Rows Removed by Filter: [1-9]`, plan,
			"%s: the last of 1,000 steps reads the 999 artifacts already taken:\n%s", label, plan)
	})
}
