package jobguard

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testenv"
)

// The overdue listing must let the active-jobs partial index do the
// filtering even under a generic plan, which PostgreSQL switches to after a
// few executions of a prepared statement: with the status as a parameter a
// generic plan cannot prove the index's predicate and scans the whole table.
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

	conn, err := env.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `PREPARE overdue AS `+g.batch.overdue)
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(ctx, `DEALLOCATE overdue`) }()
	rows, err := conn.Query(ctx, `EXPLAIN EXECUTE overdue('{chapter}', '{1800000000}', NULL, 1000)`)
	require.NoError(t, err)
	var lines []string
	for rows.Next() {
		var l string
		require.NoError(t, rows.Scan(&l))
		lines = append(lines, l)
	}
	require.NoError(t, rows.Err())
	text := strings.Join(lines, "\n")
	require.Contains(t, text, "jobs_active_idx", text)
	require.NotContains(t, text, "Seq Scan on jobs", text)
}
