package reclaim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/commitgate"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/lease"
	"github.com/jobguard/jobguard/reclaim"
)

// A rescue that committed unheard is counted by its reason read back, so
// the reason must come back whole: on a failure reason column too narrow
// for RescuedReason, New refuses it (as it refuses a reclaimed or a
// cancelled reason it would cut) rather than store it cut, and a reason
// that fits is counted "as if it had heard the commit" (reclaim/doc.go).
func TestSweep_RescueCommittedUnheardOnANarrowReasonColumnIsCounted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := rescueSetup(t)
	b.env.Exec(`ALTER TABLE jobs ALTER COLUMN failure_reason TYPE varchar(20)`)
	_, err := jobguard.NewWithConfig(ctx, b.env.Pool, b.jobs.Table, jobguard.GuardConfig{
		Shared: jobguard.Shared{ReclaimedReason: "reclaimed", CancelledReason: "cancelled"}})
	require.ErrorIs(t, err, jobguard.ErrUnstorable)
	require.ErrorContains(t, err, "Shared.RescuedReason")
	b.jobs.Guard = b.jobs.GuardWith(t, jobguard.Shared{ReclaimedReason: "reclaimed", CancelledReason: "cancelled",
		RescuedReason: "rescued"})
	dead := b.startLease(t, lease.Config{})
	orphan := b.startUnder(t, dead)
	require.NoError(t, dead.Stop(ctx))
	gate := commitgate.New(t, b.env, "jobs")
	r, logs := newReclaimer(t, b.jobs, reclaim.Config{DB: gate.Pool, Workers: &lease.Workers{},
		Limits: reclaim.StaticLimits{"chapter": time.Hour}})

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opened := make(chan error, 1)
	go func() { opened <- gate.Intercept(cancel, false) }()
	rep, err := r.Sweep(sctx)
	require.NoError(t, <-opened)
	require.Error(t, err, "the sweep's context ended during its commit")
	row := b.jobs.Read(t, orphan.JobID)
	require.Equal(t, b.jobs.Table.Statuses.Queued, row.Status, "the server committed the rescue")
	require.Equal(t, orphan.Generation+1, row.Generation)
	require.Equal(t, []string{orphan.JobID}, rep.RescuedIDs, logs.String())
	require.Equal(t, 1, rep.Rescued)
}
