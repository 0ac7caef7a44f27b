package reclaim_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/safe"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
)

// wrappedPool is a caller's handle over a pool, as an instrumenting
// wrapper is: it embeds the pool (so it sends batches, as the pool does)
// and puts its own code in front of Query. onQuery runs before each
// query, with its number, from 1 (a TableSource's queries on it are its
// pages' reads: the types travel in a batch).
type wrappedPool struct {
	*pgxpool.Pool
	queries *atomic.Int32
	onQuery func(ctx context.Context, n int32)
}

func (w wrappedPool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	w.onQuery(ctx, w.queries.Add(1))
	return w.Pool.Query(ctx, sql, args...)
}

var _ jobguard.DB = wrappedPool{}

// A TableSource over a caller's handle that stops heeding its context
// (its wrapper waits on something with no deadline) is a source that
// ignores its context: the sweep abandons it a grace after its deadline,
// says so, and returns.
func TestSweep_TableSourceOnAHandleThatIgnoresItsContextIsAbandoned(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	stallAll(t, env, 2)
	s := newStuck(t)
	w := wrappedPool{Pool: env.Pool, queries: new(atomic.Int32), onQuery: func(context.Context, int32) { <-s }}
	src, err := reclaim.NewTableSource(jobs.Guard, w)
	require.NoError(t, err)
	timeout := 400 * time.Millisecond
	r, _ := newReclaimer(t, jobs, reclaim.Config{Source: src, SweepTimeout: timeout})

	type result struct {
		rep reclaim.Report
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		rep, err := r.Sweep(context.Background())
		done <- result{rep, err}
	}()
	select {
	case res := <-done:
		require.ErrorIs(t, res.err, safe.ErrAbandoned)
	case <-time.After(timeout + safe.Grace + 10*time.Second):
		t.Fatalf("the sweep (SweepTimeout %v) had not returned after %v: it waits on its source's handle, which ignores its context",
			timeout, time.Since(start).Round(time.Millisecond))
	}
}
