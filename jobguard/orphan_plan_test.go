package jobguard

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/lease"
)

// The rescue's read reads only the owned running jobs, through the bundled
// migration's partial index, also under a generic plan: its cost grows
// with the jobs a process claims, not with the table.
func TestOrphans_GenericPlanUsesThePartialIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	env.Exec(Migration)
	env.Exec(lease.Migration)
	env.Exec(`INSERT INTO jobs (type, status, lease_id, started_at, updated_at)
		SELECT 'chapter', 'COMPLETED', 'w' || (i % 50), now() - interval '1 day', now() FROM generate_series(1, 50000) AS i`)
	env.Exec(`INSERT INTO jobs (type, status, started_at, updated_at)
		SELECT 'chapter', 'PROCESSING', now() - interval '2 hours', now() FROM generate_series(1, 5000)`)
	env.Exec(`INSERT INTO jobs (type, status, lease_id, started_at, updated_at)
		SELECT 'chapter', 'PROCESSING', 'w' || (i % 5), now(), now() FROM generate_series(1, 100) AS i`)
	env.Exec(`ANALYZE jobs`)
	g, err := New(ctx, env.Pool, DefaultTable())
	require.NoError(t, err)
	sql, err := g.set.Orphans(lease.Workers{}.Live, lease.Workers{}.DeadLocked)
	require.NoError(t, err)

	tx := genericPlans(t, env, sql.Read)
	text := explain(t, tx, `EXPLAIN EXECUTE stmt(1000, NULL)`)
	require.Contains(t, text, "jobs_owned_idx", text)
	require.NotContains(t, text, "Seq Scan on jobs", text)
}
