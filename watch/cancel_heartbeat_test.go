package watch_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

// A cancel that the execution learns of from its own heartbeat, before any
// notice or check (notices over Redis, and Cancel's result not published:
// the check would find it later), still says "cancelled": the cause is
// the operator's cancel, not a reclaim, and wraps jobguard.ErrCancelled.
func TestLost_HeartbeatAfterACancelSaysCancelled(t *testing.T) {
	t.Parallel()
	for _, v := range []fixture.Variant{fixture.Default, fixture.NoGeneration} {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, "redis", v, watch.Config{CheckInterval: time.Hour})
			exec := b.start(t, 1)
			ctx := b.watch(t, exec)
			ctx0 := context.Background()
			_, err := b.jobs.Guard.Cancel(ctx0, b.env.Pool, exec.JobID, "wrong input")
			require.NoError(t, err)

			err = b.jobs.Guard.Touch(ctx0, b.env.Pool, exec)
			require.ErrorIs(t, err, jobguard.ErrJobTerminal)
			require.True(t, b.w.Lost(ctx0, exec, err))
			cause, _ := cancelledWithin(t, ctx, time.Now(), time.Second)
			require.Equal(t, watch.ViaHeartbeat, cause.Via)
			require.True(t, cause.Cancelled, "cause: %v", cause)
			require.ErrorIs(t, cause, jobguard.ErrCancelled)
			require.NotContains(t, cause.Error(), "reclaimed")
		})
	}
}
