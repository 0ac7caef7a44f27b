package reclaim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/reclaim"
)

// slowCount lists as its table does, and its running count takes until
// the sweep's deadline, as a count over a loaded table or a slow path does.
type slowCount struct{ reclaim.Source }

func (slowCount) CountRunning(ctx context.Context) (map[string]int, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A running count that fails by running out of time still leaves the
// sweep time to reclaim within the caps, as a count that fails at once
// does: the count, like the listing, does not take the time the writes
// of what the pages decided need.
func TestSweep_RunningCountThatRunsIntoTheDeadlineStillReclaimsWithinTheCaps(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	stallAll(t, env, 4)
	table, err := reclaim.NewTableSource(jobs.Guard, env.Pool)
	require.NoError(t, err)
	r, _ := newReclaimer(t, jobs, reclaim.Config{Source: slowCount{table}, Brake: reclaim.Brake{ShareFloor: 1},
		SweepTimeout: 2 * time.Second})
	rep, err := r.Sweep(context.Background())
	require.Error(t, err)
	require.Len(t, rep.ReclaimedIDs, 2, "half of the stalled, read as the running; report %+v; error %v", rep, err)
	require.Equal(t, 2, countStatus(t, env, "FAILED"))
}
