package retain_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/retain"
)

// A batch must read only the rows it removes however the statement is
// planned. Under a generic plan, which a long-lived connection settles on
// after a few batches, the LIMIT is unknown and estimated at a tenth of the
// rows the age might match: on a table of mostly settled records the
// planner then hashes the whole table to find the rows to delete by their
// ctid, and at ten million records every batch of a thousand reads them
// all. The sweep's own statements are caught by auto_explain on a session
// whose plans are all generic.
func TestSweep_BatchReadsOnlyTheRowsItRemovesUnderAGenericPlan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.env.Exec(`INSERT INTO job_settlements (jobs_table, job_id, generation, state, settled_at)
		SELECT $1, 'young-' || g, 1, 'confirmed', now() - interval '1 second' * g FROM generate_series(1, 100000) AS g`, b.key)
	b.env.Exec(`INSERT INTO job_settlements (jobs_table, job_id, generation, state, settled_at)
		SELECT $1, 'old-' || g, 1, 'confirmed', now() - interval '40 days' FROM generate_series(1, 2000) AS g`, b.key)
	b.env.Exec(`ANALYZE job_settlements`)

	cfg, err := pgxpool.ParseConfig(b.env.DatabaseURL)
	require.NoError(t, err)
	cfg.MaxConns = 1
	for k, v := range map[string]string{"plan_cache_mode": "force_generic_plan", "session_preload_libraries": "auto_explain",
		"auto_explain.log_min_duration": "0", "auto_explain.log_level": "notice"} {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	var (
		mu    sync.Mutex
		plans []string
	)
	cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		plans = append(plans, n.Message)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	defer pool.Close()
	if err := pool.Ping(context.Background()); err != nil && strings.Contains(err.Error(), "auto_explain") {
		t.Skipf("the server cannot load auto_explain: %v", err)
	}

	sw, err := retain.New(retain.Config{DB: pool, Tables: []retain.Table{{Rule: b.settler.Retention()}}})
	require.NoError(t, err)
	rep, err := sw.Sweep(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 2000, rep.Tables[0].Removed)

	mu.Lock()
	defer mu.Unlock()
	var batches int
	for _, p := range plans {
		if !strings.Contains(p, "DELETE FROM") {
			continue
		}
		batches++
		require.NotContains(t, p, "Seq Scan", "a batch reads no row but those it removes:\n"+p)
		require.Contains(t, p, "job_settlements_settled_idx", p)
		require.Contains(t, p, "Tid Scan on job_settlements x", p)
	}
	require.Equal(t, 3, batches, "two full batches and the empty one that ends the pass")
}
