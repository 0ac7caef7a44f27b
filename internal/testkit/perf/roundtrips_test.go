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
		markers                 jobguard.MarkerBackend
		guardedPG, guardedRedis float64
		settledPG, settledRedis float64
	}{
		{markers: jobguard.MarkersRedis, guardedPG: 9, guardedRedis: 1, settledPG: 9, settledRedis: 1},
		{markers: jobguard.MarkersPostgres, guardedPG: 9, guardedRedis: 0, settledPG: 9, settledRedis: 0},
	} {
		t.Run("markers="+tc.markers.String(), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, tc.markers, 1)
			pg, rdb := w.roundTrips(t, w.plain, 3)
			require.Equal(t, []float64{8, 0}, []float64{pg, rdb}, "plain: postgres, redis")
			pg, rdb = w.roundTrips(t, w.guarded, 3)
			require.LessOrEqual(t, pg, tc.guardedPG, "guarded: postgres")
			require.LessOrEqual(t, rdb, tc.guardedRedis, "guarded: redis")
			pg, rdb = w.roundTrips(t, w.settled, 3)
			require.LessOrEqual(t, pg, tc.settledPG, "settled: postgres")
			require.LessOrEqual(t, rdb, tc.settledRedis, "settled: redis")
		})
	}
}
