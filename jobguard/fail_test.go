package jobguard_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

// A worker fails its job with what went wrong, often an error's or a
// panic's text, which may hold U+0000 or bytes that are not UTF-8. The job
// is failed all the same, its reason stored as text can hold it: a reason
// is a message, and a write that the server refuses would leave the job
// PROCESSING until a reclaim.
func TestFail_ReasonThatTextCannotHoldIsStoredAsItCan(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	ctx := context.Background()
	exec := jobguard.Execution{JobID: jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}

	require.NoError(t, jobs.Guard.Fail(ctx, env.Pool, exec, "model said \x00 at \xff"))
	row := jobs.Read(t, exec.JobID)
	require.Equal(t, jobs.Table.Statuses.Failed, row.Status)
	require.Equal(t, "model said \\x00 at \uFFFD", row.Reason)
}

// The reclaimer's reason is compared as stored by every start guard: one
// that text cannot hold as it is is refused when the guard is made.
func TestNewWithConfig_RefusesAReclaimedReasonTextCannotHold(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	_, err := jobguard.NewWithConfig(context.Background(), env.Pool, jobs.Table,
		jobguard.GuardConfig{Shared: jobguard.Shared{ReclaimedReason: "reclaimed\x00"}})
	require.ErrorIs(t, err, jobguard.ErrUnstorable)
	require.ErrorContains(t, err, "Shared.ReclaimedReason")
}

// A reason is a message, often a panic's text with its stack: far longer
// than a varchar(n) failure-reason column (a shape New accepts) holds. The
// job is failed all the same, "whatever the message says", and not left
// PROCESSING because the server refused the reason's length.
func TestFail_ReasonLongerThanAVarcharColumnStillFailsTheJob(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.IntID) // failure_reason varchar(200)
	ctx := context.Background()
	exec := jobguard.Execution{JobID: jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}

	reason := "panic: boom\n\ngoroutine 7 [running]:\n" + strings.Repeat("main.work(0xc000012345)\n\t/src/worker.go:42 +0x1d\n", 10)
	require.NoError(t, jobs.Guard.Fail(ctx, env.Pool, exec, reason))
	row := jobs.Read(t, exec.JobID)
	require.Equal(t, jobs.Table.Statuses.Failed, row.Status)
}
