package scale_test

import (
	"context"
	"fmt"
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

// Rounds of 100k aged rows of each retained table, copied in beside the
// ten million and swept out, with a VACUUM (autovacuum's work) after each:
// once the space of a round is freed, the next reuses it, and the later
// rounds' largest size stays within one round of the earlier rounds'. A
// table the sweep did not empty grows by a whole round each time.
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
	const rounds = 6
	var sizes []map[string]int64
	var roundBytes map[string]int64
	var held []string
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
		var dead int64
		require.NoError(t, bd.pool.QueryRow(ctx, `SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables
			WHERE schemaname = current_schema() AND relname IN ('job_settlements', 'job_artifacts', 'job_reclaim_markers')`).Scan(&dead))
		if dead > 0 {
			held = append(held, fmt.Sprintf("round %d: VACUUM left %d removed rows, which another session's snapshot still sees", round+1, dead))
		}
	}
	t.Logf("one round's rows take %v bytes", roundBytes)
	// A table at a steady size refills the space each sweep freed; VACUUM
	// gives the empty pages at its end back now and then, so the size
	// swings within a round or two. A table that kept its rows grows by a
	// round each time: the later rounds' largest size is then rounds/2
	// rounds above the earlier rounds' largest.
	for tbl := range roundBytes {
		early, late := int64(0), int64(0)
		for r, sz := range sizes {
			if r < rounds/2 {
				early = max(early, sz[tbl])
			} else {
				late = max(late, sz[tbl])
			}
		}
		if late-early >= roundBytes[tbl] && len(held) > 0 {
			// The space of rows another transaction could still see was
			// not free to reuse, whatever the sweep did.
			t.Skipf("%s grew by %d bytes, but VACUUM could not free all: %v", tbl, late-early, held)
		}
		require.Less(t, late-early, roundBytes[tbl], "%s: largest size %d in the first %d rounds, %d in the next %d (a round takes %d)",
			tbl, early, rounds/2, late, rounds-rounds/2, roundBytes[tbl])
	}
}
