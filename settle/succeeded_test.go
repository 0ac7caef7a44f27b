package settle_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/settle"
)

// A finalize whose updates all succeeded and whose billing then fails
// (here an increment that panics once) leaves both successes on the
// record: no process died, so the sweep only bills, and no update runs
// again.
func TestFinalize_FailedBillingKeepsTheUpdatesThatSucceeded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var broken atomic.Bool
	broken.Store(true)
	incs := increments(nil)
	exec, spec := b.video(t, 44_000)
	incs["video_ms"] = panickingIncrement(incs["video_ms"], exec.JobID, &broken)
	cfg := quick(settle.Config{Increments: incs})
	cfg.Grace = time.Hour
	s := b.settler(t, cfg)

	_, err := s.Finalize(ctx, b.env.Pool, exec, spec)
	require.ErrorIs(t, err, settle.ErrPending)
	require.Equal(t, map[string]int{"video": 1, "content": 1}, b.runs(t, exec))
	rec, _ := b.record(t, exec)
	require.Equal(t, "pending", rec.State)
	assert.Empty(t, rec.Pending, "both updates succeeded: only the billing is left")

	broken.Store(false)
	b.due(exec)
	rep := b.settleAll(t, s)
	require.Equal(t, 1, rep.Settled)
	require.Equal(t, map[string]int{"video": 1, "content": 1}, b.runs(t, exec), "no update that succeeded ran again")
	require.Equal(t, billed{LedgerRows: 1, AccountMS: 44_000, VideoReady: true, Published: true}, b.billed(t, exec))
}

// A caller whose context ends while an update is still running keeps the
// success of the update that finished before: the sweep runs only the one
// that did not.
func TestFinalize_ContextEndingAfterASuccessKeepsThatSuccess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	videoDone, release := make(chan struct{}), make(chan struct{})
	b.hooks.worked = func(name string) {
		if name == "video" {
			close(videoDone)
		}
	}
	b.hooks.enter = func(name string) {
		if name == "content" {
			<-release
		}
	}
	cfg := quick(settle.Config{})
	cfg.Grace = time.Hour
	s := b.settler(t, cfg)
	exec, spec := b.video(t, 45_000)
	go func() {
		<-videoDone
		cancel() // the worker shuts down while the content update runs
		close(release)
	}()

	_, err := s.Finalize(ctx, b.env.Pool, exec, spec)
	require.ErrorIs(t, err, settle.ErrPending)
	require.Equal(t, map[string]int{"video": 1}, b.runs(t, exec))
	rec, _ := b.record(t, exec)
	require.Equal(t, "pending", rec.State)
	assert.Equal(t, []string{"content"}, rec.Pending, "the video update succeeded before the context ended")

	b.hooks.worked, b.hooks.enter = nil, nil
	b.due(exec)
	rep := b.settleAll(t, s)
	require.Equal(t, 1, rep.Settled)
	require.Equal(t, map[string]int{"video": 1, "content": 1}, b.runs(t, exec), "the video update did not run again")
}
