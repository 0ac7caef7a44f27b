package jobguard_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
)

// A failure reason column that New accepts is one Start can read. A column
// under a nondeterministic collation (case-insensitive, say) is accepted,
// but the start statement's reason test cannot run under it: every Start
// of a job that carries a reason fails with a server error, and a job
// whose reason says reclaimed is no longer refused as reclaimed.
func TestStart_FailureReasonUnderANondeterministicCollation(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	env.Exec(`CREATE COLLATION nocase (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`)
	env.Exec(`CREATE TABLE jobs (
	    id bigint PRIMARY KEY,
	    status text NOT NULL,
	    failure_reason text COLLATE nocase,
	    updated_at timestamptz NOT NULL DEFAULT now(),
	    generation bigint NOT NULL DEFAULT 0)`)
	env.Exec(marker.Migration)
	env.Exec(`INSERT INTO jobs (id, status, failure_reason) VALUES (1, 'QUEUED', 'model call timed out'), (2, 'QUEUED', $1)`,
		jobguard.ReclaimedReasonDefault)
	g, err := jobguard.New(ctx, env.Pool, jobguard.Table{Name: "jobs", GenerationColumn: "generation"})
	if err != nil {
		// Refusing the mapping up front is as good as serving it.
		require.ErrorContains(t, err, "FailureReasonColumn")
		return
	}
	sg, err := jobguard.NewStartGuard(g, nil, jobguard.StartGuardConfig{})
	require.NoError(t, err)

	exec, err := sg.Start(ctx, env.Pool, "1")
	require.NoError(t, err, "a job whose reason is not the reclaimer's starts")
	require.Equal(t, int64(1), exec.Generation)

	_, err = sg.Start(ctx, env.Pool, "2")
	require.ErrorIs(t, err, jobguard.ErrReclaimed, "a job whose reason is the reclaimer's is refused as reclaimed")
	require.True(t, jobguard.IsPermanent(err))
}
