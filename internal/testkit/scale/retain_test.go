package scale_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/retain"
	"github.com/jobguard/jobguard/settle"
)

// sideSizes are the three retained tables with their indexes, in bytes.
func (bd *bundle) sideSizes(t testing.TB) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, tbl := range []string{"job_settlements", "job_artifacts", "job_reclaim_markers"} {
		var n int64
		require.NoError(t, bd.pool.QueryRow(context.Background(), `SELECT pg_total_relation_size($1::regclass)`, tbl).Scan(&n))
		out[tbl] = n
	}
	return out
}

// Rounds of a day's worth of aged rows copied in beside the ten million and
// swept out: once the first round's space is freed (VACUUM, autovacuum's
// work), every later round reuses it, and no table grows by more than a
// small part of one round. A table the sweep did not empty, or whose freed
// space stayed held, grows by a whole round each time.
func TestRetain_KeepsTheSideTablesAtASteadySizeAtScale(t *testing.T) {
	need(t)
	bd := open(t, sizes()[1].size)
	ctx := context.Background()
	s, err := settle.New(ctx, settle.Config{Guard: bd.guard, DB: bd.pool})
	require.NoError(t, err)
	arts, err := compensate.New(ctx, compensate.Config{Guard: bd.guard, DB: bd.pool,
		Compensators: map[string]compensate.Func{"file": func(context.Context, pgx.Tx, compensate.Artifact) error { return nil }}})
	require.NoError(t, err)
	ms, err := marker.NewPostgresStore(bd.guard, marker.Config{})
	require.NoError(t, err)
	sw, err := retain.New(retain.Config{DB: bd.pool, Tables: []retain.Table{
		{Rule: s.Retention()}, {Rule: arts.Retention()}, {Rule: ms.Retention()}}})
	require.NoError(t, err)

	vacuum := func() {
		for _, tbl := range []string{"job_settlements", "job_artifacts", "job_reclaim_markers"} {
			bd.exec(t, `VACUUM `+tbl)
		}
	}
	vacuum()
	const rounds = 5
	var sizes []map[string]int64
	var roundBytes map[string]int64
	for round := range rounds {
		before := bd.sideSizes(t)
		bd.copyAged(t)
		grown := bd.sideSizes(t)
		if round == 0 {
			roundBytes = map[string]int64{}
			for k, v := range grown {
				roundBytes[k] = v - before[k]
			}
		}
		rep, err := sw.Sweep(ctx)
		require.NoError(t, err)
		for _, tr := range rep.Tables {
			require.EqualValues(t, aged, tr.Removed, "round %d: %+v", round+1, rep)
		}
		vacuum()
		sizes = append(sizes, bd.sideSizes(t))
		t.Logf("round %d: %v", round+1, sizes[round])
	}
	for tbl, first := range sizes[0] {
		last := sizes[rounds-1][tbl]
		require.Less(t, last-first, roundBytes[tbl]/2,
			"%s grew from %d to %d bytes over %d rounds of %d bytes each", tbl, first, last, rounds-1, roundBytes[tbl])
	}
}
