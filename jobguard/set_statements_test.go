package jobguard

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
)

// Counting the running jobs without a start time reads the active index
// alone: one probe per active type and one range per type of the rows
// without a start, never the table, so it costs what those rows cost and
// stays below the cost at which a server compiles the statement (JIT).
func TestUnstarted_PlanReadsOnlyTheActiveIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	env.Exec(Migration)
	env.Exec(`INSERT INTO jobs (type, status, started_at, updated_at)
		SELECT (ARRAY['chapter', 'video', 'export'])[1 + i % 3], 'COMPLETED', now() - interval '1 day', now()
		FROM generate_series(1, 50000) AS i`)
	env.Exec(`INSERT INTO jobs (type, status, started_at, updated_at)
		SELECT (ARRAY['chapter', 'video'])[1 + i % 2], 'PROCESSING', now() - interval '2 hours', now()
		FROM generate_series(1, 5000) AS i`)
	env.Exec(`INSERT INTO jobs (type, status, updated_at)
		SELECT (ARRAY['chapter', 'video', 'export'])[1 + i % 3], (ARRAY['PROCESSING', 'QUEUED'])[1 + i % 2], now()
		FROM generate_series(1, 1000) AS i`)
	env.Exec(`ANALYZE jobs`)
	g, err := New(ctx, env.Pool, DefaultTable())
	require.NoError(t, err)

	var n int
	err = env.Pool.QueryRow(ctx, g.set.Unstarted).Scan(&n)
	require.NoError(t, err)
	require.Equal(t, 500, n, "the PROCESSING half of the rows without a start, of every type")

	text := explain(t, env.Pool, `EXPLAIN `+g.set.Unstarted)
	require.Contains(t, text, "jobs_active_idx", text)
	require.Regexp(t, `Index Cond: \(\(type = k(_\d+)?\.type\) AND \(started_at IS NULL\)\)`, text, "one range per type:\n"+text)
	require.NotContains(t, text, "Seq Scan", text)
	require.Less(t, planCost(t, text), 100000.0, "below jit_above_cost's default:\n"+text)
}
