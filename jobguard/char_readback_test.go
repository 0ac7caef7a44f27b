package jobguard_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

// A reclaim must be a reclaim however the failure reason column stores the
// reclaimer's reason. A char(n) column pads the value and drops trailing
// spaces when read, so the reason "reclaimed: " would come back as
// "reclaimed:", and the check would take the reclaim of an execution for
// the execution's own Fail. New refuses such a reason, and a status label
// that such a status column could not read back.
func TestNew_ACharColumnRefusesWhatItWouldNotReadBack(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	env.Exec(`CREATE TABLE jobs (
	    id bigint PRIMARY KEY,
	    status char(12) NOT NULL,
	    failure_reason char(60),
	    updated_at timestamptz NOT NULL DEFAULT now(),
	    generation bigint NOT NULL DEFAULT 0)`)
	table := jobguard.Table{Name: "jobs", GenerationColumn: "generation"}

	_, err := jobguard.NewWithConfig(ctx, env.Pool, table,
		jobguard.GuardConfig{Shared: jobguard.Shared{ReclaimedReason: "reclaimed: "}})
	require.ErrorIs(t, err, jobguard.ErrUnstorable)
	require.ErrorContains(t, err, `Shared.ReclaimedReason "reclaimed: " ends in a space`)

	bad := table
	bad.Statuses = jobguard.Statuses{Queued: "QUEUED", Processing: "PROCESSING", Completed: "COMPLETED", Failed: "FAILED "}
	_, err = jobguard.New(ctx, env.Pool, bad)
	require.ErrorContains(t, err, `the status "FAILED " would never read back as written`)

	_, err = jobguard.NewWithConfig(ctx, env.Pool, table,
		jobguard.GuardConfig{Shared: jobguard.Shared{ReclaimedReason: "reclaimed:"}})
	require.NoError(t, err, "a reason that reads back as written is taken")
}
