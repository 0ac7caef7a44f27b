package reclaim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/reclaim"
)

// slowAfterFirstPage hands over the first page of its source, then takes
// until the sweep's deadline to fetch the next one, as a large queue read
// over a slow path does.
type slowAfterFirstPage struct{ reclaim.Source }

func (s slowAfterFirstPage) Active(ctx context.Context, q reclaim.Query, page func([]reclaim.ActiveJob) error) error {
	pages := 0
	return s.Source.Active(ctx, q, func(l []reclaim.ActiveJob) error {
		if pages++; pages > 1 {
			<-ctx.Done()
			return ctx.Err()
		}
		return page(l)
	})
}

// A sweep whose source runs into the deadline part way still reclaims the
// jobs of the pages it was handed before: the stalled jobs of a queue too
// large to list within one deadline are reclaimed a part at each sweep,
// rather than none at any sweep.
func TestSweep_DeadlineDuringTheListingStillReclaimsThePagesHandedOver(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	ids := stallAll(t, env, 4)
	table, err := reclaim.NewTableSource(jobs.Guard, env.Pool)
	require.NoError(t, err)
	r, _ := newReclaimer(t, jobs, reclaim.Config{Source: slowAfterFirstPage{table}, PageSize: 2,
		SweepTimeout: 2 * time.Second})

	rep, err := r.Sweep(context.Background())
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Len(t, rep.ReclaimedIDs, 2, "the first page's jobs (of %v); report %+v; error %v", ids, rep, err)
	require.Equal(t, 2, countStatus(t, env, "FAILED"))
}

// failingCount lists as its table does, and cannot count the running jobs.
type failingCount struct{ reclaim.Source }

func (failingCount) CountRunning(context.Context) (map[string]int, error) {
	return nil, errors.New("count: connection reset")
}

// A running count that fails does not stop the sweep's reclaims: the brake
// reads the stalled jobs as the running ones (its strictest reading), lets
// through what the caps allow, and the sweep fails with the count's error.
func TestSweep_RunningCountThatFailsStillReclaimsWithinTheCaps(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	stallAll(t, env, 4)
	table, err := reclaim.NewTableSource(jobs.Guard, env.Pool)
	require.NoError(t, err)
	r, _ := newReclaimer(t, jobs, reclaim.Config{Source: failingCount{table}, Brake: reclaim.Brake{ShareFloor: 1}})
	rep, err := r.Sweep(context.Background())
	require.ErrorContains(t, err, "connection reset")
	require.Len(t, rep.ReclaimedIDs, 2, "half of the stalled, read as the running; report %+v", rep)
	require.Equal(t, 2, rep.Braked)
	require.Equal(t, 2, countStatus(t, env, "FAILED"))
}
