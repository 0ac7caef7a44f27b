package reclaim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/lease"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/watch"
)

// An execution that only looked dead and comes back after its job was
// rescued has lost the job, but not for good: every refusal it meets (its
// save, its heartbeat, its watcher's check) says the job went back to the
// queue (ErrRequeued), and none is permanent, so that whatever delivers
// jobs (a queue, or a poller of QUEUED rows) runs it again. Once another
// execution has started it, the same comeback is refused for good; a
// reclaimed job's comeback stays refused for good.
func TestRescue_ComebackIsToldTheJobGoesAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := rescueSetup(t)
	stopped := b.startLease(t, lease.Config{})
	comeback := b.startUnder(t, stopped)
	slow := b.startUnder(t, nil)
	require.NoError(t, stopped.Stop(ctx))
	b.jobs.Backdate(t, slow.JobID, b.jobs.Table.StartedAtColumn, time.Hour)
	b.jobs.Backdate(t, slow.JobID, b.jobs.Table.UpdatedAtColumn, time.Hour)
	r, logs := newReclaimer(t, b.jobs, reclaim.Config{Workers: &lease.Workers{}, NoProgress: time.Minute,
		Limits: reclaim.StaticLimits{"chapter": 30 * time.Minute}})
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{comeback.JobID}, rep.RescuedIDs, logs.String())
	require.Equal(t, []string{slow.JobID}, rep.ReclaimedIDs, logs.String())

	sg, err := jobguard.NewStartGuard(b.jobs.Guard, b.env.Redis, jobguard.StartGuardConfig{})
	require.NoError(t, err)
	w, err := watch.New(watch.Config{Guard: b.jobs.Guard, DB: b.env.Pool, Transport: watch.Transport{Postgres: b.env.Pool},
		CheckInterval: time.Hour})
	require.NoError(t, err)

	// The rescued job's comeback: lost, to another attempt.
	for what, err := range map[string]error{
		"save":      b.jobs.Guard.CompleteIfActive(ctx, b.env.Pool, comeback),
		"heartbeat": b.jobs.Guard.Touch(ctx, b.env.Pool, comeback),
	} {
		require.ErrorIs(t, err, jobguard.ErrJobTerminal, what)
		require.ErrorIs(t, err, jobguard.ErrRequeued, what)
		require.False(t, jobguard.IsPermanent(err), "%s: %v", what, err)
	}
	again, err := sg.Requeued(ctx, b.env.Pool, comeback)
	require.NoError(t, err)
	require.True(t, again)
	watched, release := w.Watch(ctx, comeback)
	defer release()
	n, err := w.Check(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	var lost *watch.LostError
	require.ErrorAs(t, context.Cause(watched), &lost)
	require.True(t, lost.Requeued, lost.Error())
	require.ErrorIs(t, lost, jobguard.ErrRequeued)
	require.False(t, jobguard.IsPermanent(lost), lost.Error())

	// The reclaimed job's comeback: lost for good.
	err = b.jobs.Guard.CompleteIfActive(ctx, b.env.Pool, slow)
	require.NotErrorIs(t, err, jobguard.ErrRequeued)
	require.True(t, jobguard.IsPermanent(err), err.Error())
	again, err = sg.Requeued(ctx, b.env.Pool, slow)
	require.NoError(t, err)
	require.False(t, again)

	// Another attempt started the rescued job: the comeback's refusal is
	// now for good, and the new execution completes it.
	next, err := sg.Start(ctx, b.env.Pool, comeback.JobID)
	require.NoError(t, err)
	err = b.jobs.Guard.CompleteIfActive(ctx, b.env.Pool, comeback)
	require.True(t, jobguard.IsPermanent(err), err.Error())
	require.False(t, errors.Is(err, jobguard.ErrRequeued), err.Error())
	again, err = sg.Requeued(ctx, b.env.Pool, comeback)
	require.NoError(t, err)
	require.False(t, again)
	require.NoError(t, b.jobs.Guard.CompleteIfActive(ctx, b.env.Pool, next))
}
