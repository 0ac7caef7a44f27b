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

// An owner column declared NOT NULL (a Prisma String with a default of "")
// is accepted by the mapping, but the rescue writes NULL to it: the dead
// worker's job is never rescued, and every sweep fails.
func TestSweep_NotNullOwnerColumnNeverRescues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := rescueSetup(t)
	b.env.Exec(`UPDATE jobs SET lease_id = '' WHERE lease_id IS NULL;
		ALTER TABLE jobs ALTER COLUMN lease_id SET DEFAULT '', ALTER COLUMN lease_id SET NOT NULL`)
	g, err := jobguard.NewWithConfig(ctx, b.env.Pool, b.jobs.Table, jobguard.GuardConfig{Shared: jobguard.Shared{
		Markers: jobguard.MarkersRedis, Prefix: b.env.Prefix, NoticeChannel: b.env.Schema}})
	if err != nil {
		return // refused when built: a clear error at start
	}
	b.jobs.Guard = g

	dead := b.startLease(t, lease.Config{})
	orphan := b.startUnder(t, dead)
	require.NoError(t, dead.Stop(ctx))

	r, logs := newReclaimer(t, b.jobs, reclaim.Config{Workers: &lease.Workers{},
		Limits: reclaim.StaticLimits{"chapter": time.Hour}})
	rep, err := r.Sweep(ctx)
	require.NoError(t, err, logs.String())
	require.Equal(t, 1, rep.Rescued)
	require.Equal(t, b.jobs.Table.Statuses.Queued, b.jobs.Read(t, orphan.JobID).Status)
}
