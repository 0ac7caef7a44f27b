package settle

import (
	"context"
	"strings"
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
	ctx := context.Background()
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
	s := buildStatements("job_settlements", `"s"."tasks"`, ledgerlink.Of(ledger).Insert)

	tx, err := env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `PREPARE claim AS `+s.claim)
	require.NoError(t, err)
	defer func() { _, _ = tx.Exec(ctx, `DEALLOCATE claim`) }()
	rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE claim(1000000, now())`)
	require.NoError(t, err)
	var lines []string
	for rows.Next() {
		var l string
		require.NoError(t, rows.Scan(&l))
		lines = append(lines, l)
	}
	require.NoError(t, rows.Err())
	plan := strings.Join(lines, "\n")
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
	ledger, err := usage.NewLedger(usage.Config{})
	require.NoError(t, err)
	s := buildStatements("job_settlements", `"s"."tasks"`, ledgerlink.Of(ledger).Insert)
	// Each statement with arguments for the record '3000' (pending) or
	// '3002' (given up).
	stmts := map[string]struct{ sql, args string }{
		"mark":        {s.mark, `'3000', 1, 'video'`},
		"retry":       {s.retry, `'3000', 1, 'err', 1000000, 0, 0`},
		"unconfirmed": {s.unconfirmed, `'3000', 1, 'err', 1000000, 0, 0, '{video}'`},
		"giveUp":      {s.giveUp, `'3000', 1, 'err', 0, 0`},
		"handBack":    {s.handBack, `'3000', 1, 0, 0`},
		"confirm":     {s.confirm, `'3000', 1, '"s"."tasks"', '3000', 1, now()`},
		"state":       {s.state, `'3000', 1`},
		"reopen":      {s.reopen, `'3002', 1`},
	}
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			env.Exec(`ANALYZE job_settlements`)
		}
		for name, st := range stmts {
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				plan := env.Explain(st.sql, st.args, mode)
				require.Contains(t, plan, "job_settlements_pkey", "%s, %s, analyzed %v:\n%s", name, mode, analyzed, plan)
				require.NotRegexp(t, `Rows Removed by Filter: [1-9]`, plan, "%s, %s, analyzed %v:\n%s", name, mode, analyzed, plan)
			}
		}
	}
}
