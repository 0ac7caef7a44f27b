package watch

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/jobguard/marker"
)

// A reclaim is a reclaim however the failure reason column stores the
// reclaimer's reason: in a char(n) column, which New accepts and which
// pads the value and drops trailing spaces when read, the reason
// "reclaimed: " comes back as "reclaimed:", and the check takes the
// reclaim of an execution for the execution's own Fail.
func TestJudge_ReclaimInACharReasonColumnIsLost(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	env.Exec(`CREATE TABLE jobs (
	    id bigint PRIMARY KEY,
	    status text NOT NULL,
	    failure_reason char(60),
	    updated_at timestamptz NOT NULL DEFAULT now(),
	    generation bigint NOT NULL DEFAULT 0)`)
	env.Exec(marker.Migration)
	env.Exec(`INSERT INTO jobs (id, status) VALUES (1, 'QUEUED')`)
	g, err := jobguard.NewWithConfig(ctx, env.Pool, jobguard.Table{Name: "jobs", GenerationColumn: "generation"},
		jobguard.GuardConfig{Shared: jobguard.Shared{ReclaimedReason: "reclaimed: "}})
	require.NoError(t, err)
	sg, err := jobguard.NewStartGuard(g, nil, jobguard.StartGuardConfig{})
	require.NoError(t, err)
	exec, err := sg.Start(ctx, env.Pool, "1")
	require.NoError(t, err)

	// The reclaimer's write, with the guard's reason.
	set := jobset.New(g)
	rows, err := set.Snapshot(ctx, env.Pool, []string{"1"})
	require.NoError(t, err)
	res, err := set.FailIfUnchanged(ctx, env.Pool, []jobset.Job{rows["1"]}, g.Shared().ReclaimedReason)
	require.NoError(t, err)
	require.Len(t, res.Failed, 1)

	rows, err = set.Snapshot(ctx, env.Pool, []string{"1"})
	require.NoError(t, err)
	r := rules{fenced: g.Fenced(), statuses: g.Table().Statuses, shared: g.Shared()}
	require.Equal(t, lost, judge(r, exec, rows["1"], true),
		"reclaimed with the guard's reason, read back as %q", rows["1"].FailureReason)
}
