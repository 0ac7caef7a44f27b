package settle

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/ledgerlink"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/usage"
)

// A sweep takes its own jobs table's due records through the due index,
// the jobs table its first column, even under a generic plan: the pending
// records of the other tables that share the records table, however many
// are due, are not read.
func TestClaim_GenericPlanReadsOnlyItsOwnTablesDueRecords(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	env.Exec(Migration)
	env.Exec(`INSERT INTO job_settlements (jobs_table, job_id, generation, state, next_attempt_at)
		SELECT '"s"."exports"', g::text, 1, CASE WHEN g % 10 = 0 THEN 'pending' ELSE 'confirmed' END, now() - interval '1 hour'
		FROM generate_series(1, 50000) AS g`)
	env.Exec(`INSERT INTO job_settlements (jobs_table, job_id, generation, next_attempt_at)
		SELECT '"s"."tasks"', g::text, 1, now() - interval '1 hour' FROM generate_series(1, 20) AS g`)
	env.Exec(`ANALYZE job_settlements`)
	ledger, err := usage.NewLedger(usage.Config{})
	require.NoError(t, err)
	s := buildStatements("job_settlements", `"s"."tasks"`, ledgerlink.Of(ledger))

	plan := env.Explain(s.claim, `1000000, now()`, "force_generic_plan")
	require.Contains(t, plan, "job_settlements_due_idx", plan)
	require.Regexp(t, `Index Cond: \(\(jobs_table = '"s"."tasks"'::text\) AND \(next_attempt_at <= `, plan)
	require.NotContains(t, plan, "Rows Removed by Filter", "no other table's record is read:\n"+plan)
}

// A record's own statements reach its row through the primary key, never
// through the due index or the settled index, under custom and generic
// plans, before the table was analyzed and after: a scan of the due index
// reads every pending record of the jobs table, and every dead entry the
// confirmed ones left, to find one, so that each finalize and each retry
// would cost what the backlog does.
func TestRecordStatements_ReachTheRowByItsPrimaryKey(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	env.Exec(usage.Migration)
	env.Exec(Migration)
	env.Exec(`INSERT INTO job_settlements (jobs_table, job_id, generation, state, settled_at, next_attempt_at)
		SELECT '"s"."tasks"', g::text, 1, (ARRAY['pending', 'confirmed', 'given_up'])[g % 3 + 1],
		       CASE WHEN g % 3 > 0 THEN now() END, now() - interval '1 hour'
		FROM generate_series(1, 30000) AS g`)
	env.Exec(`CREATE TABLE totals (account text PRIMARY KEY, ms bigint NOT NULL DEFAULT 0)`)
	ledger, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
		"video_ms": {Table: "totals", Key: "account", Column: "ms"}}})
	require.NoError(t, err)
	s := buildStatements("job_settlements", `"s"."tasks"`, ledgerlink.Of(ledger))
	// Each statement with arguments for the record '3000' (pending) or
	// '3002' (given up).
	stmts := map[string][2]string{
		"mark":        {s.mark, `'3000', 1, 'video'`},
		"retry":       {s.retry, `'3000', 1, 'err', 1000000, 0, 0`},
		"unconfirmed": {s.unconfirmed, `'3000', 1, 'err', 1000000, 0, 0, '{video}'`},
		"giveUp":      {s.giveUp, `'3000', 1, 'err', 0, 0`},
		"handBack":    {s.handBack, `'3000', 1, 0, 0`},
		"confirm":     {s.confirm, `'3000', 1, '"s"."tasks"', '3000', 1, now()`},
		"counted":     {s.counted([]string{"video_ms"}), `'3000', 1, '"s"."tasks"', '3000', 1, now(), '[]', 'video_ms', 'acct'`},
		"state":       {s.state, `'3000', 1`},
		"reopen":      {s.reopen, `'3002', 1`},
	}
	env.Plans("job_settlements", stmts, func(label, plan string) {
		require.Contains(t, plan, "job_settlements_pkey", "%s:\n%s", label, plan)
		require.NotRegexp(t, `Rows Removed by Filter: [1-9]`, plan, "%s:\n%s", label, plan)
	})
}
