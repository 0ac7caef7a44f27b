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

// An owner column under a case-insensitive collation: the job of a dead
// worker whose lease id differs only in case from a live worker's is
// never rescued, as the live lease is taken for its owner's.
func TestSweep_CaseInsensitiveOwnerColumnKeepsADeadWorkersJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := rescueSetup(t)
	b.env.Exec(`CREATE COLLATION ci_owner (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
		DROP INDEX IF EXISTS jobs_owned_idx; ALTER TABLE jobs ALTER COLUMN lease_id TYPE text COLLATE ci_owner`)
	b.jobs.Guard = b.jobs.GuardWith(t, jobguard.Shared{})

	dead := b.startLease(t, lease.Config{ID: "Worker-A"})
	b.startLease(t, lease.Config{ID: "worker-a"})
	orphan := b.startUnder(t, dead)
	require.NoError(t, dead.Stop(ctx))

	r, logs := newReclaimer(t, b.jobs, reclaim.Config{Workers: &lease.Workers{},
		Limits: reclaim.StaticLimits{"chapter": time.Hour}})
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Rescued, "a dead worker's job is not rescued: %s", logs.String())
	require.Equal(t, b.jobs.Table.Statuses.Queued, b.jobs.Read(t, orphan.JobID).Status)
}
