package jobguard

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
)

// The overdue listing must let the active-jobs partial index do the
// filtering even under a generic plan, which PostgreSQL switches to after a
// few executions of a prepared statement: with the status as a parameter a
// generic plan cannot prove the index's predicate and scans the whole table.
// And its estimate must stay small enough that a server with JIT does not
// compile it at every run.
func TestOverdue_GenericPlanUsesThePartialIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	env.Exec(Migration)
	env.Exec(`INSERT INTO jobs (type, status, started_at, updated_at)
		SELECT 'chapter', 'COMPLETED', now() - interval '1 day', now() FROM generate_series(1, 50000)`)
	env.Exec(`INSERT INTO jobs (type, status, started_at, updated_at)
		SELECT 'chapter', 'PROCESSING', now() - interval '2 hours', now() FROM generate_series(1, 100)`)
	env.Exec(`ANALYZE jobs`)
	g, err := New(ctx, env.Pool, DefaultTable())
	require.NoError(t, err)

	tx := genericPlans(t, env, g.set.Overdue)
	text := explain(t, tx, `EXPLAIN EXECUTE stmt('{chapter}', '{1800000000}', 1000)`)
	require.Contains(t, text, "jobs_active_idx", text)
	require.Regexp(t, `Index Cond: \(\(type = \w+\.type\) AND \(started_at > '-infinity'`, text, "one index range per type")
	require.NotContains(t, text, "Seq Scan on jobs", text)
	require.Less(t, planCost(t, text), 100000.0, "below jit_above_cost's default:\n"+text)
}

// The server keeps the overdue listing's generic plan after a few runs on
// a connection, rather than planning it anew at every run: no custom plan
// may see the arrays of types and limits (a custom plan that knew their
// length would never cost the same as the generic one).
func TestOverdue_ServerSettlesOnTheGenericPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	env.Exec(Migration)
	env.Exec(`INSERT INTO jobs (type, status, started_at, updated_at)
		SELECT 'chapter', 'PROCESSING', now() - interval '2 hours', now() FROM generate_series(1, 100)`)
	env.Exec(`ANALYZE jobs`)
	g, err := New(ctx, env.Pool, DefaultTable())
	require.NoError(t, err)
	c, err := env.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()

	for range 10 {
		rows, err := c.Query(ctx, g.set.Overdue, "{chapter}", "{1800000000}", 1000)
		require.NoError(t, err)
		rows.Close()
		require.NoError(t, rows.Err())
	}
	var generic, custom int64
	require.NoError(t, c.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements
		WHERE statement = $1`, g.set.Overdue).Scan(&generic, &custom))
	require.Positive(t, generic, "planned at every run: %d custom plans in 10 runs", custom)
}

// planCost reads the total cost of an EXPLAIN's top node.
func planCost(t *testing.T, plan string) float64 {
	t.Helper()
	m := regexp.MustCompile(`cost=[0-9.]+\.\.([0-9.]+)`).FindStringSubmatch(plan)
	if m == nil {
		t.Fatalf("no cost in plan:\n%s", plan)
	}
	c, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The reclaim write must stay linear in its rows under a generic plan,
// which knows nothing of the arrays' sizes: a plan that joins the locked
// rows against the changed ones by a nested loop takes seconds at thousands
// of rows.
func TestFailIfUnchanged_GenericPlanIsLinear(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	env.Exec(Migration)
	env.Exec(`INSERT INTO jobs (type, status, generation, started_at, updated_at)
		SELECT 'chapter', 'PROCESSING', 1, now() - interval '2 hours', now() - interval '1 hour' FROM generate_series(1, 2000)`)
	env.Exec(`ANALYZE jobs`)
	g, err := New(ctx, env.Pool, DefaultTable())
	require.NoError(t, err)

	tx := genericPlans(t, env, g.set.Fail)
	var ids, statuses, updated, gens string
	require.NoError(t, tx.QueryRow(ctx, `SELECT array_agg(id)::text, array_agg(status)::text,
		array_agg(updated_at)::text, array_agg(generation)::text FROM jobs`).Scan(&ids, &statuses, &updated, &gens))
	plan := explain(t, tx, "EXPLAIN (ANALYZE, COSTS OFF) EXECUTE stmt('FAILED', 'stuck', "+
		ident.Literal(ids)+", "+ident.Literal(statuses)+", "+ident.Literal(updated)+", "+ident.Literal(gens)+")")
	require.NotContains(t, plan, "Join Filter", "every join goes through the primary key or the ctid:\n"+plan)
	require.Contains(t, plan, "Update on jobs", plan)
}

// genericPlans prepares sql as the statement "stmt" in a transaction of
// its own that plans every statement generically, as PostgreSQL does after
// a prepared statement's fifth execution, and returns the transaction. At
// the end of the test the statement is deallocated (a prepared statement
// outlives a rollback) and the transaction rolled back.
func genericPlans(t *testing.T, env *testenv.Env, sql string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := env.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	_, err = tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `PREPARE stmt AS `+sql)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = tx.Exec(ctx, `DEALLOCATE stmt`) }) // runs before the rollback
	return tx
}

// explain runs an EXPLAIN and returns its lines as one text.
func explain(t *testing.T, db DB, sql string) string {
	t.Helper()
	rows, err := db.Query(context.Background(), sql)
	require.NoError(t, err)
	var lines []string
	for rows.Next() {
		var l string
		require.NoError(t, rows.Scan(&l))
		lines = append(lines, l)
	}
	require.NoError(t, rows.Err())
	return strings.Join(lines, "\n")
}

// History's statement, even as a generic plan, reads each type's latest
// finished jobs as one backward range of the finished index, stopping at
// its LIMIT, and never scans the table.
func TestHistory_GenericPlanReadsTheFinishedIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	env.Exec(Migration)
	env.Exec(`INSERT INTO jobs (type, status, started_at, updated_at)
		SELECT (ARRAY['chapter', 'video'])[1 + i % 2], CASE WHEN i % 50 = 0 THEN 'PROCESSING' ELSE 'COMPLETED' END,
		       now() - (i % 2000) * interval '1 minute' - interval '5 minutes', now() - (i % 2000) * interval '1 minute'
		FROM generate_series(1, 50000) AS i`)
	env.Exec(`ANALYZE jobs`)
	g, err := New(ctx, env.Pool, DefaultTable())
	require.NoError(t, err)

	tx := genericPlans(t, env, g.set.History)
	text := explain(t, tx, `EXPLAIN EXECUTE stmt('{chapter,video}', '{0,0}', 604800000000, 1000, 0.99, 'reclaimed')`)
	require.Contains(t, text, "Index Scan Backward using jobs_finished_idx", text)
	require.Regexp(t, `Index Cond: \(\(type = \w+\.type\) AND \(updated_at >= `, text, "one index range per type")
	require.Contains(t, text, "Limit", text)
	require.NotContains(t, text, "Seq Scan on jobs", text)
}
