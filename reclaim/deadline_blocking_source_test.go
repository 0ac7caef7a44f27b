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

// stuckAfterFirstPage hands over the first page of its source, then blocks
// on its next fetch without heeding its context (a client call with no
// deadline of its own), until the test ends.
type stuckAfterFirstPage struct {
	reclaim.Source
	released <-chan struct{}
}

func (s stuckAfterFirstPage) Active(ctx context.Context, q reclaim.Query, page func([]reclaim.ActiveJob) error) error {
	pages := 0
	return s.Source.Active(ctx, q, func(l []reclaim.ActiveJob) error {
		if pages++; pages > 1 {
			<-s.released
			return ctx.Err()
		}
		return page(l)
	})
}

// A source that stops heeding its context part way is abandoned in time
// for the sweep to reclaim the jobs of the pages it handed over, as one
// that returns at its deadline is.
func TestSweep_SourceStuckPastItsDeadlineStillReclaimsThePagesHandedOver(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	ids := stallAll(t, env, 4)
	table, err := reclaim.NewTableSource(jobs.Guard, env.Pool)
	require.NoError(t, err)
	released := make(chan struct{})
	t.Cleanup(func() { close(released) })
	r, _ := newReclaimer(t, jobs, reclaim.Config{Source: stuckAfterFirstPage{table, released}, PageSize: 2,
		SweepTimeout: 2 * time.Second})

	rep, err := r.Sweep(context.Background())
	require.Error(t, err)
	require.Len(t, rep.ReclaimedIDs, 2, "the first page's jobs (of %v); report %+v; error %v", ids, rep, err)
	require.Equal(t, 2, countStatus(t, env, "FAILED"))
}
