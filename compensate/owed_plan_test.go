package compensate_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
)

// Compensating one execution (CompensateExecution, a rejected Finalize)
// reaches that execution's owed artifacts through the owed index (the
// execution's key, then the id), never by reading the jobs table's owed
// artifacts through the index of the open ones or the primary key: when compensations fail (the
// store is down) the owed artifacts pile up, and each rejected completion
// would then read every one of them to find its own. Checked under custom
// and generic plans, and under the default plan cache mode once the
// statement has run as often as a pooled connection runs it, before the
// table was analyzed and after.
func TestCompensateExecution_ReachesItsOwedArtifactsByTheirKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.env.Exec(`INSERT INTO job_artifacts (jobs_table, job_id, generation, kind, ref, state)
		SELECT $1, g::text, 1, 'file', 'r' || g, (ARRAY['rejected', 'kept', 'done'])[g % 3 + 1]
		FROM generate_series(1, 30000) AS g`, b.jobs.Guard.TableKey())
	owed := compensate.OwedOfSQL(b.arts)
	check := func(label, plan string) {
		require.NotRegexp(t, `Rows Removed by Filter: [1-9]`, plan, "%s:\n%s", label, plan)
		require.Contains(t, plan, "job_artifacts_owed_idx", "%s:\n%s", label, plan)
	}
	check("auto after ten runs, analyzed false", explainAfterRuns(t, b, owed, 10))
	// Artifact 27000 (rejected) of job 27000, generation 1.
	b.env.Plans("job_artifacts", map[string][2]string{"owed of one execution": {owed, `0, '27000', 1`}}, check)
	check("auto after ten runs, analyzed true", explainAfterRuns(t, b, owed, 10))
}

// explainAfterRuns prepares sql on one connection, executes it runs times
// for other executions' owed artifacts (as one pooled connection does over
// as many compensations) under the default plan cache mode, and returns
// the plan of its next execution, analyzed, in a transaction rolled back.
func explainAfterRuns(t *testing.T, b *bundle, sql string, runs int) string {
	t.Helper()
	ctx := context.Background()
	tx, err := b.env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SET LOCAL plan_cache_mode = auto`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `PREPARE owed_after_runs AS `+sql)
	require.NoError(t, err)
	// A prepared statement outlives the transaction.
	defer func() { _, _ = tx.Exec(ctx, `DEALLOCATE owed_after_runs`) }()
	for i := 0; i < runs; i++ {
		_, err = tx.Exec(ctx, fmt.Sprintf(`EXECUTE owed_after_runs(0, '%d', 1)`, 3*i+1)) // a kept artifact's execution
		require.NoError(t, err)
	}
	rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE owed_after_runs(0, '27000', 1)`)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}
