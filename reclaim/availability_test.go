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

// A worker's transaction holds one job's row and sits idle. The sweep must
// not wait for it: that row is being written, which is progress; every other
// stuck job is reclaimed in the same sweep.
func TestSweep_LockedRowIsSkippedAndTheRestReclaimed(t *testing.T) {
	t.Parallel()
	for _, source := range []string{"table", "queue"} {
		t.Run(source, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env := testenv.New(t)
			jobs := fixture.Create(t, env, fixture.Default)
			held := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
			free := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
			cfg := reclaim.Config{SweepTimeout: 10 * time.Second}
			if source == "queue" {
				old := time.Now().Add(-2 * time.Hour)
				cfg.Source = listSource{{ID: held, Type: "chapter", StartedAt: old}, {ID: free, Type: "chapter", StartedAt: old}}
			}
			r, _ := newReclaimer(t, jobs, cfg)

			worker, err := env.Pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = worker.Rollback(ctx) }()
			_, err = worker.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, held)
			require.NoError(t, err)

			start := time.Now()
			rep, err := r.Sweep(ctx)
			require.NoError(t, err)
			require.Less(t, time.Since(start), 5*time.Second, "the sweep did not wait for the lock")
			require.Equal(t, []string{free}, rep.ReclaimedIDs)
			require.Equal(t, 1, rep.Locked, "the held row is counted, not waited for")
			require.Equal(t, "FAILED", jobs.Read(t, free).Status)
			require.NoError(t, worker.Rollback(ctx))
			require.Equal(t, "PROCESSING", jobs.Read(t, held).Status)
			require.False(t, hasMarker(t, jobs, held))
		})
	}
}
