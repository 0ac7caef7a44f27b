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

// An operator's cancel reaches the execution's context by its notice, on
// both transports: over Postgres Guard.Cancel sends it itself, with its
// commit; over Redis the caller publishes what Cancel returned with
// PublishCancelled. The cause says "cancelled", not "reclaimed", and wraps
// jobguard.ErrCancelled.
func TestWatch_CancelNoticeCancelsTheExecutionAndSaysCancelled(t *testing.T) {
	t.Parallel()
	for _, kind := range transports {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind, fixture.Default, watch.Config{CheckInterval: time.Hour})
			exec := b.start(t, 3)
			ctx := b.watch(t, exec)

			ctx0 := context.Background()
			from := time.Now()
			lost, err := b.jobs.Guard.Cancel(ctx0, b.env.Pool, exec.JobID, "wrong input")
			require.NoError(t, err)
			require.Equal(t, exec, lost)
			if kind == "redis" {
				require.NoError(t, b.pub.PublishCancelled(ctx0, lost))
			}
			cause, took := cancelledWithin(t, ctx, from, time.Second)
			t.Logf("%s: cancelled %v after the cancel", kind, took)
			require.Equal(t, watch.ViaNotice, cause.Via)
			require.True(t, cause.Cancelled)
			require.ErrorIs(t, cause, jobguard.ErrCancelled)
			require.Contains(t, cause.Error(), "cancelled")
			require.NotContains(t, cause.Error(), "reclaimed")
		})
	}
}

// A cancel whose notice never arrives is found by the check, which says
// "cancelled" too: on a fenced table by the bumped generation, and on a
// table without one by the cancel's failure reason, which is not the
// execution's own Fail.
func TestCheck_CancelledJobIsLostAndSaysCancelled(t *testing.T) {
	t.Parallel()
	for _, v := range []fixture.Variant{fixture.Default, fixture.NoGeneration} {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			// Redis carries the notices, so the cancel's Postgres notice
			// is heard by no one.
			b := setup(t, "redis", v, watch.Config{CheckInterval: time.Hour})
			exec := b.start(t, 1)
			ctx := b.watch(t, exec)
			_, err := b.jobs.Guard.Cancel(context.Background(), b.env.Pool, exec.JobID, "")
			require.NoError(t, err)
			requireAlive(t, ctx, "the execution before the check")

			n, err := b.w.Check(context.Background())
			require.NoError(t, err)
			require.Equal(t, 1, n)
			cause, _ := cancelledWithin(t, ctx, time.Now(), time.Second)
			require.Equal(t, watch.ViaCheck, cause.Via)
			require.Equal(t, b.jobs.Table.Statuses.Failed, cause.Status)
			require.True(t, cause.Cancelled)
			require.ErrorIs(t, cause, jobguard.ErrCancelled)
			require.Contains(t, cause.Error(), "cancelled by an operator (check: job is FAILED")
		})
	}
}
