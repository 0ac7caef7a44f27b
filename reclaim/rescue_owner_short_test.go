package reclaim_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/lease"
)

// An owner column too short for the lease's id is accepted when the start
// guard is built under that lease, and every Start then fails.
func TestStartGuard_OwnerColumnTooShortForTheLeaseID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := rescueSetup(t)
	b.env.Exec(`DROP INDEX IF EXISTS jobs_owned_idx; ALTER TABLE jobs ALTER COLUMN lease_id TYPE varchar(16)`)
	b.jobs.Guard = b.jobs.GuardWith(t, jobguard.Shared{})
	l := b.startLease(t, lease.Config{}) // a uuid: 36 characters

	sg, err := jobguard.NewStartGuard(b.jobs.Guard, b.env.Redis, jobguard.StartGuardConfig{Owner: l})
	if err != nil {
		return // refused when built: a clear error at start
	}
	id := b.jobs.Insert(t, fixture.Job{Status: b.jobs.Table.Statuses.Queued})
	_, err = sg.Start(ctx, b.env.Pool, id)
	require.NoError(t, err, "the start guard was built, and then no job can start under its owner")
}
