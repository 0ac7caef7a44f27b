package reclaim_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/reclaim"
)

// With the share floor turned off (negative), a share cap is still a cap
// that lets a real stall through a part at a time: the one running job of
// a deployment, stalled, is reclaimed within a few sweeps, never held back
// by a cap rounded down to nothing at every sweep.
func TestSweep_ShareCapWithoutAFloorStillReclaimsAStalledJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	ids := stallAll(t, env, 1)
	r, _ := newReclaimer(t, jobs, reclaim.Config{Brake: reclaim.Brake{ShareFloor: -1}})

	var reclaimed []string
	var reasons []string
	for range 3 {
		rep, err := r.Sweep(ctx)
		require.NoError(t, err)
		reclaimed = append(reclaimed, rep.ReclaimedIDs...)
		if rep.BrakeReason != "" {
			reasons = append(reasons, rep.BrakeReason)
		}
	}
	require.Equal(t, ids, reclaimed, "brake reasons: %q", reasons)
	require.Equal(t, 1, countStatus(t, env, "FAILED"))
}
