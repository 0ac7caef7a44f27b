package perf

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
)

// TestLifecycle_RoundTrips bounds the round trips of a job's whole life,
// so that a statement added to the path fails here (one taken away only
// lowers the bound to write down). The plain life is the floor every
// guarded one is measured against.
func TestLifecycle_RoundTrips(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		markers jobguard.MarkerBackend
		redis   float64 // the start's marker read
	}{
		{markers: jobguard.MarkersRedis, redis: 1},
		{markers: jobguard.MarkersPostgres, redis: 0},
	} {
		t.Run("markers="+tc.markers.String(), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, tc.markers, 1)
			pg, rdb := w.roundTrips(t, w.plain, 3)
			require.Equal(t, []float64{8, 0}, []float64{pg, rdb}, "plain: postgres, redis")
			for _, life := range []struct {
				name string
				life lifecycle
				pg   float64
			}{
				// start, beat, completion (3), update, accrual with its counter
				{"guarded", w.guarded, 7},
				// the accrual: BEGIN with the ledger row, increment, COMMIT
				{"guarded with an increment", w.guardedInc, 9},
				// the billing: the confirmation with the ledger row and
				// the counter's upsert, one statement
				{"settled", w.settled, 7},
				{"settled with an increment", w.settledInc, 9},
			} {
				pg, rdb := w.roundTrips(t, life.life, 3)
				require.LessOrEqual(t, pg, life.pg, "%s: postgres", life.name)
				require.LessOrEqual(t, rdb, tc.redis, "%s: redis", life.name)
			}
		})
	}
}
