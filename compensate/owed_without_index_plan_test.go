package compensate_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
)

// A deployment that has not applied 0005, or whose index is there but not
// valid (a CREATE INDEX CONCURRENTLY that failed, which IF NOT EXISTS does
// not build again), still takes one execution's owed artifacts through the
// execution's key: it reads at most the execution's own artifacts, never
// the jobs table's artifacts recorded before them through the primary key.
// Here an execution that owes 1,000 artifacts recorded them after 30,000
// other artifacts of its jobs table; its drain's first step must not read
// those 30,000.
func TestCompensateExecution_WithoutTheOwedIndexReadsOnlyTheExecutionsArtifacts(t *testing.T) {
	t.Parallel()
	for name, without := range map[string]string{
		// 0005 only adds this index: without it the table is as 0001-0004 left it.
		"dropped": `DROP INDEX job_artifacts_owed_idx`,
		"invalid": `UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'job_artifacts_owed_idx'::regclass`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.env.Exec(without)
			key := b.jobs.Guard.TableKey()
			b.env.Exec(`INSERT INTO job_artifacts (jobs_table, job_id, generation, kind, ref, state)
				SELECT $1, g::text, 1, 'file', 'r' || g, (ARRAY['rejected', 'kept', 'done'])[g % 3 + 1]
				FROM generate_series(100, 30100) AS g`, key)
			b.env.Exec(`INSERT INTO job_artifacts (jobs_table, job_id, generation, kind, ref, state)
				SELECT $1, '7', 1, 'file', 'segment-' || g, 'rejected' FROM generate_series(1, 1000) AS g`, key)
			var first int64
			require.NoError(t, b.env.Pool.QueryRow(context.Background(),
				`SELECT min(id) FROM job_artifacts WHERE job_id = '7' AND generation = 1`).Scan(&first))
			// New looks for the index: a process started without it.
			owed := compensate.OwedOfSQL(b.newArtifacts(t, b.env.Pool))
			removed := regexp.MustCompile(`Rows Removed by Filter: (\d+)`)
			for _, analyzed := range []bool{false, true} {
				if analyzed {
					b.env.Exec(`ANALYZE job_artifacts`)
				}
				for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
					plan := b.env.Explain(owed, `0, '7', 1`, mode)
					for _, m := range removed.FindAllStringSubmatch(plan, -1) {
						n, err := strconv.Atoi(m[1])
						require.NoError(t, err)
						require.LessOrEqual(t, n, 1000,
							"%s, analyzed %v: the drain's first step reads the jobs table's artifacts before the execution's (first id %d):\n%s",
							mode, analyzed, first, plan)
					}
				}
			}
		})
	}
}
