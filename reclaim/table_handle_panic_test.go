package reclaim_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
)

// A TableSource over a caller's handle that panics (or calls
// runtime.Goexit) part way through the listing fails the sweep with an
// error wrapping a *jobguard.PanicError, and the jobs of the pages it
// handed over before are still reclaimed, as for any source that fails
// part way.
func TestSweep_TableSourceWhoseHandlePanicsPartWayStillReclaimsThePagesHandedOver(t *testing.T) {
	t.Parallel()
	for name, fail := range map[string]func(){
		"panic":  func() { panic("the wrapper broke") },
		"goexit": runtime.Goexit,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := testenv.New(t)
			jobs := fixture.Create(t, env, fixture.Default)
			ids := stallAll(t, env, 4)
			w := wrappedPool{Pool: env.Pool, queries: new(atomic.Int32), onQuery: func(_ context.Context, n int32) {
				if n > 1 {
					fail()
				}
			}}
			src, err := reclaim.NewTableSource(jobs.Guard, w)
			require.NoError(t, err)
			r, _ := newReclaimer(t, jobs, reclaim.Config{Source: src, PageSize: 2, SweepTimeout: 5 * time.Second})

			rep, err := r.Sweep(context.Background())
			var pe *jobguard.PanicError
			require.ErrorAs(t, err, &pe)
			require.Len(t, rep.ReclaimedIDs, 2, "the first page's jobs (of %v); report %+v; error %v", ids, rep, err)
			require.Equal(t, 2, countStatus(t, env, "FAILED"))
		})
	}
}
