package watch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

// TestWatch_EverySpellingOfAnIDIsOneJob watches one execution of a job
// under every spelling of its id: the reclaim's notice (or, on a table
// without generations, the check it asks for) finds every one of them,
// Lost through any spelling finds them all, and every cause names the job
// by its canonical id.
func TestWatch_EverySpellingOfAnIDIsOneJob(t *testing.T) {
	t.Parallel()
	for _, v := range fixture.Variants {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, "redis", v, noChecks)
			gen := int64(2)
			if !b.jobs.Guard.Fenced() {
				gen = 0
			}
			watchAll := func(id string) []context.Context {
				var ctxs []context.Context
				for _, sp := range b.jobs.Spellings(id) {
					ctxs = append(ctxs, b.watch(t, jobguard.Execution{JobID: sp.ID, Generation: gen}))
				}
				require.Equal(t, len(ctxs), b.w.Len())
				return ctxs
			}
			causes := func(ctxs []context.Context, id string, via watch.Via) {
				t.Helper()
				for i, ctx := range ctxs {
					select {
					case <-ctx.Done():
					case <-time.After(10 * time.Second):
						t.Fatalf("the execution watched as %q was not cancelled", b.jobs.Spellings(id)[i].ID)
					}
					var cause *watch.LostError
					require.ErrorAs(t, context.Cause(ctx), &cause)
					require.Equal(t, id, cause.JobID, "the cause names the job by its canonical id")
					require.Equal(t, via, cause.Via)
				}
				require.Zero(t, b.w.Len())
			}

			noticed := b.start(t, gen).JobID
			ctxs := watchAll(noticed)
			b.reclaim(t, true, noticed)
			via := watch.ViaNotice
			if !b.jobs.Guard.Fenced() {
				via = watch.ViaCheck
			}
			causes(ctxs, noticed, via)

			lost := b.start(t, gen).JobID
			ctxs = watchAll(lost)
			spellings := b.jobs.Spellings(lost)
			last := jobguard.Execution{JobID: spellings[len(spellings)-1].ID, Generation: gen}
			require.True(t, b.w.Lost(context.Background(), last, fmt.Errorf("heartbeat: %w", jobguard.ErrJobTerminal)))
			causes(ctxs, lost, watch.ViaHeartbeat)
		})
	}
}
