package reclaim_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/reclaim"
)

// countTimeouts records the statement_timeout each count of the running
// jobs without a start ran under, as the count itself reports it.
type countTimeouts struct {
	mu   sync.Mutex
	seen []string
}

func (c *countTimeouts) notice(_ *pgconn.PgConn, n *pgconn.Notice) {
	if v, ok := strings.CutPrefix(n.Message, "count under "); ok {
		c.mu.Lock()
		c.seen = append(c.seen, v)
		c.mu.Unlock()
	}
}

func (c *countTimeouts) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen...)
}

// reportingCountPool is a pool of one connection on countingRole, with
// the session statement_timeout given, whose count of the running jobs
// without a start tells (in a notice, once per row it reads) the
// statement_timeout it runs under.
func reportingCountPool(t *testing.T, env *testenv.Env, session string) (*pgxpool.Pool, *countTimeouts) {
	t.Helper()
	cfg := countingRole(t, env, "tell", `RAISE NOTICE 'count under %', current_setting('statement_timeout');`)
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = session
	seen := &countTimeouts{}
	cfg.ConnConfig.OnNotice = seen.notice
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, pool.Ping(context.Background()))
	return pool, seen
}

// The count in the opening batch runs under its budget, never under no
// timeout: the count itself tells the statement_timeout it runs under (a
// budget longer than the session's 5min is not taken), and a sweep
// deadline so short that a tenth of it is under a millisecond still gives
// the count one (0 would turn the timeout off, and a count with none would
// hold the listing back for as long as it takes).
func TestSweep_UnstartedCountInTheBatchNeverRunsWithoutATimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	insertUnstarted(t, jobs)
	pool, seen := reportingCountPool(t, env, "5min")
	table, err := reclaim.NewTableSource(jobs.Guard, pool)
	require.NoError(t, err)
	for budget, want := range map[time.Duration]string{time.Minute: "1min", time.Hour: "5min"} {
		r, _ := newReclaimer(t, jobs, reclaim.Config{Source: table, SweepTimeout: 24 * time.Hour})
		reclaim.SetCountBudget(r, budget)
		before := len(seen.all())
		rep, err := r.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, rep.NoStartTime)
		got := seen.all()[before:]
		require.NotEmpty(t, got, "budget %v: the count told nothing", budget)
		for _, st := range got {
			require.Equal(t, want, st, "budget %v: %v", budget, got)
		}
	}

	for timeout, want := range map[time.Duration]string{time.Minute: "50", time.Second: "50", 100 * time.Millisecond: "10",
		9 * time.Millisecond: "1", time.Millisecond: "1"} {
		r, _ := newReclaimer(t, jobs, reclaim.Config{Source: table, SweepTimeout: timeout})
		require.Equal(t, want, reclaim.BudgetArg(r), "sweep timeout %v", timeout)
	}
}
