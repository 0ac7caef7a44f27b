package reclaim_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/reclaim"
)

// statementLog records the statements a connection sends on their own,
// outside any batch.
type statementLog struct {
	mu   sync.Mutex
	sqls []string
}

func (l *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	l.sqls = append(l.sqls, d.SQL)
	l.mu.Unlock()
	return ctx
}

func (l *statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// since returns the statements sent on their own from the n-th on, and
// how many were sent in all.
func (l *statementLog) since(n int) ([]string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.sqls[n:]...), len(l.sqls)
}

// With a limits table that predates the mode column on the source's own
// handle, the limits cannot travel in the opening batch, and are read
// apart, as before; the count of the jobs without a start, which never ran
// out of its budget nor failed, still travels with the types, in the
// batch, on every sweep, and is never sent on its own after the reclaims.
func TestSweep_QuickUnstartedCountStaysInTheBatchBesideALimitsTableWithoutMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	env.Exec(`CREATE TABLE job_type_limits (job_type text PRIMARY KEY, max_runtime interval NOT NULL)`)
	env.Exec(`INSERT INTO job_type_limits VALUES ('chapter', '30 minutes')`)
	insertUnstarted(t, jobs)

	cfg, err := pgxpool.ParseConfig(env.DatabaseURL)
	require.NoError(t, err)
	log := &statementLog{}
	cfg.ConnConfig.Tracer = log
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	limits, err := reclaim.NewTableLimits(reclaim.TableLimitsConfig{DB: pool})
	require.NoError(t, err)
	r, _ := newReclaimer(t, jobs, reclaim.Config{DB: pool, Limits: limits})
	// A budget no loaded machine runs out of.
	reclaim.SetCountBudget(r, time.Minute)

	for i := range 3 {
		stalled := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
		_, from := log.since(0)
		rep, err := r.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{stalled}, rep.ReclaimedIDs, "sweep %d", i+1)
		require.Equal(t, 1, rep.NoStartTime, "sweep %d", i+1)
		sent, _ := log.since(from)
		for _, sql := range sent {
			require.False(t, strings.Contains(sql, "count(") && strings.Contains(sql, " IS NULL"),
				"sweep %d: the count was sent on its own, after the reclaims: %s", i+1, sql)
		}
	}
}
