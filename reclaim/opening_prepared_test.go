package reclaim_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/reclaim"
)

// writeCountingConn counts the messages a client sends over it: pgx writes
// what it has queued at once, and waits for the answer, so each write is
// one round trip, whatever pgx's tracer sees (it sees neither the
// statements a batch prepares first nor the cached ones it deallocates).
type writeCountingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c writeCountingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// The count over its budget in the opening batch costs the one round trip
// it moved to, after the reclaims, and nothing else: on the source's own
// connection, a sweep sends the batch, the page and the count again (the
// reclaim writes go through Config.DB). pgx drops a failed batch's
// statements from the connection's caches, so the sweep after the one
// whose count ran out prepares them again, once; a count that ran out
// stays out of the batch, or every sweep would deallocate and prepare
// them again. Once the count is quick again, it goes back into the batch:
// the batch and the page.
func TestSweep_UnstartedCountOverItsBudgetCostsOnlyTheCountAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	insertUnstarted(t, jobs)
	pool, _ := slowCountingPool(t, env, 0.2)
	// The source's own connection, as the slow pool's role, its writes
	// counted.
	cfg := pool.Config().ConnConfig.Copy()
	cfg.Tracer = nil
	var writes atomic.Int64
	var d net.Dialer
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return writeCountingConn{Conn: c, writes: &writes}, nil
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	table, err := reclaim.NewTableSource(jobs.Guard, conn)
	require.NoError(t, err)
	r, _ := newReclaimer(t, jobs, reclaim.Config{Source: table})

	sweep := func() int64 {
		t.Helper()
		stalled := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
		before := writes.Load()
		rep, err := r.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{stalled}, rep.ReclaimedIDs)
		require.Equal(t, 1, rep.NoStartTime)
		return writes.Load() - before
	}
	sweep()
	sweep()
	for i := range 3 {
		require.Equal(t, int64(3), sweep(), "sweep %d: the batch, the page, the count again", i+3)
	}
	// Quick again: read after the reclaims once more, then in the batch
	// (once a reading after the reclaims took under half the budget, which
	// a loaded machine may delay by a sweep or two).
	env.Exec(`CREATE OR REPLACE FUNCTION count_is_slow() RETURNS boolean LANGUAGE sql AS 'SELECT true'`)
	back := false
	for range 20 {
		if back = sweep() == 2; back {
			break
		}
	}
	require.True(t, back, "the count, quick again, never went back into the batch (the batch and the page)")
}
