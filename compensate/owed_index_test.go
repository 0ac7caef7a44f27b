package compensate_test

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
)

// owedBacklog gives b's artifacts table, in place of the owed index, what
// ddl builds (nothing when it is empty; any SQL, such as marking the index
// not valid), then an execution (job 7, generation 1) that owes 1,000
// artifacts recorded after 30,000 other artifacts of its jobs table, in
// every state. It returns the statement that takes the execution's next
// owed artifact as New chose it for a process started then.
func owedBacklog(t *testing.T, b *bundle, ddl string) string {
	t.Helper()
	if ddl != "" {
		b.env.Exec(ddl)
	}
	key := b.jobs.Guard.TableKey()
	b.env.Exec(`INSERT INTO job_artifacts (jobs_table, job_id, generation, kind, ref, state)
		SELECT $1, g::text, 1, 'file', 'r' || g, (ARRAY['rejected', 'kept', 'done'])[g % 3 + 1]
		FROM generate_series(100, 30100) AS g`, key)
	b.env.Exec(`INSERT INTO job_artifacts (jobs_table, job_id, generation, kind, ref, state)
		SELECT $1, '7', 1, 'file', 'segment-' || g, 'rejected' FROM generate_series(1, 1000) AS g`, key)
	return compensate.OwedOfSQL(b.newArtifacts(t, b.env.Pool))
}

// firstStepReads checks the plans of the drain's first step for job 7
// (see testenv.Env.Plans): no count the pattern finds in one (rows removed
// by a filter, rows a node returned) is above most.
func firstStepReads(t *testing.T, b *bundle, owed string, pattern *regexp.Regexp, most int) {
	t.Helper()
	first := map[string][2]string{"first step": {owed, `0, '7', 1`}}
	b.env.Plans("job_artifacts", first, func(label, plan string) {
		for _, m := range pattern.FindAllStringSubmatch(plan, -1) {
			n, err := strconv.Atoi(m[1])
			require.NoError(t, err)
			require.LessOrEqual(t, n, most, "%s:\n%s\n%s", label, owed, plan)
		}
	})
}

var (
	rowsRemoved = regexp.MustCompile(`Rows Removed by Filter: (\d+)`)
	rowsRead    = regexp.MustCompile(`\(actual rows=(\d+)`)
)

// Without the owed index, one execution's compensation still takes its
// owed artifacts through the execution's key: its first step reads at most
// the execution's own artifacts, never, through the primary key's order,
// the 30,000 of the jobs table recorded before them. So it is when 0005
// was not applied, when its index is there but not valid (a CREATE INDEX
// CONCURRENTLY that failed, which IF NOT EXISTS does not build again), and
// when an index of the owed rows names the same columns but cannot serve
// the drain (the id only INCLUDEd, an expression in the key, another
// access method, a key column compared under another collation or
// operator class than the drain's equalities use): New takes each for
// absent.
func TestCompensateExecution_WithoutTheOwedIndexReadsOnlyTheExecutionsArtifacts(t *testing.T) {
	t.Parallel()
	const pred = `WHERE state COLLATE "C" = 'rejected'`
	for name, ddl := range map[string]string{
		"dropped": `DROP INDEX job_artifacts_owed_idx`,
		"invalid": `UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'job_artifacts_owed_idx'::regclass`,
		"id included, not in the key": `DROP INDEX job_artifacts_owed_idx;
			CREATE INDEX job_artifacts_owed_idx ON job_artifacts (jobs_table, job_id, generation) INCLUDE (id) ` + pred,
		"an expression in the key": `DROP INDEX job_artifacts_owed_idx;
			CREATE INDEX job_artifacts_owed_idx ON job_artifacts (jobs_table, job_id, lower(kind), generation, id) ` + pred,
		"a brin index": `DROP INDEX job_artifacts_owed_idx;
			CREATE INDEX job_artifacts_owed_idx ON job_artifacts USING brin (jobs_table, job_id, generation, id) ` + pred,
		"the jobs table under another collation": `DROP INDEX job_artifacts_owed_idx;
			CREATE INDEX job_artifacts_owed_idx ON job_artifacts (jobs_table COLLATE "C", job_id, generation, id) ` + pred,
		"the jobs table under another operator class": `DROP INDEX job_artifacts_owed_idx;
			CREATE INDEX job_artifacts_owed_idx ON job_artifacts (jobs_table text_pattern_ops, job_id, generation, id) ` + pred,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			firstStepReads(t, b, owedBacklog(t, b, ddl), rowsRemoved, 1000)
		})
	}
}

// The owed index, as 0005 builds it or with INCLUDE columns beside its key
// (kind and ref, the columns the drain returns), serves each step of one
// execution's drain at once: the first step reads one of the execution's
// 1,000 owed artifacts, not all of them sorted (each step of a drain of n
// reading the n - k ahead of it, n²/2 rows in all).
func TestCompensateExecution_OwedIndexServesEachStep(t *testing.T) {
	t.Parallel()
	for name, ddl := range map[string]string{
		"as built": "",
		"with included columns": `DROP INDEX job_artifacts_owed_idx;
			CREATE INDEX job_artifacts_owed_idx ON job_artifacts (jobs_table, job_id, generation, id) INCLUDE (kind, ref)
			WHERE state COLLATE "C" = 'rejected'`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			owed := owedBacklog(t, b, ddl)
			firstStepReads(t, b, owed, rowsRead, 1)
			require.Contains(t, b.env.Explain(owed, `0, '7', 1`, "force_generic_plan"), "job_artifacts_owed_idx")
		})
	}
}
