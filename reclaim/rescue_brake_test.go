package reclaim_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/lease"
	"github.com/jobguard/jobguard/reclaim"
)

// A lease is live while its expiry is ahead of the database's clock, so a
// step of that clock makes every live worker look dead at once: the
// rescue's evidence is in doubt as much as a reclaim's. A sweep that sees
// the database's clock jump since the last one rescues nothing: the jobs
// it would have rescued are counted as braked, with the clock's reason,
// and stay with their workers. The next sweep, whose clocks agree, rescues
// what is still orphaned.
func TestSweep_ClockJumpHoldsTheRescue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := rescueSetup(t)
	l := b.startLease(t, lease.Config{})
	exec := b.startUnder(t, l)
	r, logs := newReclaimer(t, b.jobs, reclaim.Config{Workers: &lease.Workers{}})
	var offset atomic.Int64
	reclaim.SetElapsedClock(r, func() time.Time { return time.Now().Add(time.Duration(offset.Load())) })
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Rescued, "the worker's lease is live")

	// The database's clock jumps an hour ahead of the reclaimer's: the
	// worker's lease, renewed a moment ago, has expired by it.
	offset.Store(int64(-time.Hour))
	b.env.Exec(`UPDATE jobguard_workers SET expires_at = now() - interval '1 second' WHERE id = '` + l.ID() + `'`)
	rep, err = r.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Rescued, logs.String())
	require.Equal(t, 1, rep.Braked)
	// About an hour: each clock is read a moment after the other.
	require.Regexp(t, `the database.s clock moved (59m5\d\.\d+s|1h0m[\d.]*s) apart`, rep.BrakeReason)
	require.Contains(t, logs.String(), `level=ERROR msg="reclaim: sweep"`)
	require.Equal(t, b.jobs.Table.Statuses.Processing, b.jobs.Read(t, exec.JobID).Status)

	// The clocks agree again: the lease is still not live, and the job is
	// rescued.
	rep, err = r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{exec.JobID}, rep.RescuedIDs, logs.String())
	require.Zero(t, rep.Braked)
}

// The caps on a sweep's count do not hold rescues: a rescue fails no job,
// writes no marker and runs no parent rule (the job goes back for another
// attempt, which the start guard judges), and a worker gives its jobs up
// once its lease lapses (lease.ErrExpired), so holding them would only
// stretch the bound within which a dead worker's jobs run again. Thirty
// workers dying at once have all their jobs rescued by one sweep whose
// brake caps reclaims at ten.
func TestSweep_MassLeaseLossIsRescuedWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := rescueSetup(t)
	var orphans []string
	for range 30 {
		l := b.startLease(t, lease.Config{})
		orphans = append(orphans, b.startUnder(t, l).JobID)
		require.NoError(t, l.Stop(ctx))
	}
	r, logs := newReclaimer(t, b.jobs, reclaim.Config{Workers: &lease.Workers{},
		Brake: reclaim.Brake{MaxJobs: 10, MaxJobsPerType: 10, ShareFloor: 1}})
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, orphans, rep.RescuedIDs, logs.String())
	require.Zero(t, rep.Braked)
	for _, id := range orphans {
		require.Equal(t, jobguard.RescuedReasonDefault, b.jobs.Read(t, id).Reason)
	}
}
