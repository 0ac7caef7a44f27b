package reclaim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/lease"
	"github.com/jobguard/jobguard/reclaim"
)

// An owner column of char(n) is accepted by the mapping. A worker whose
// lease id ends in a space holds a live lease, yet the id the column gives
// back has lost its trailing space and names no lease: the rescue takes
// the running job from the live worker.
func TestSweep_CharOwnerColumnRescuesALiveWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := rescueSetup(t)
	b.env.Exec(`DROP INDEX IF EXISTS jobs_owned_idx; ALTER TABLE jobs ALTER COLUMN lease_id TYPE char(64)`)
	b.jobs.Guard = b.jobs.GuardWith(t, jobguard.Shared{})

	live := b.startLease(t, lease.Config{ID: "worker-7 "})
	require.NoError(t, live.Err())
	exec := b.startUnder(t, live)

	dead, err := lease.Workers{}.Dead(ctx, b.env.Pool, []string{live.ID()})
	require.NoError(t, err)
	require.Empty(t, dead, "the worker's lease is live")

	r, logs := newReclaimer(t, b.jobs, reclaim.Config{Workers: &lease.Workers{},
		Limits: reclaim.StaticLimits{"chapter": time.Hour}})
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Rescued, "a job under a live lease is rescued: %s", logs.String())
	require.Equal(t, b.jobs.Table.Statuses.Processing, b.jobs.Read(t, exec.JobID).Status)
	require.NoError(t, b.jobs.Guard.Touch(ctx, b.env.Pool, exec))
}
