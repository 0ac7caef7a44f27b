package jobguard_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
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
	require.Equal(t, string([]rune(reason)[:200]), row.Reason, "the reason's head, as much as the column holds")
}

// A reclaim's batched write stores its reason like Fail does: a reason
// longer than the column is cut to fit, and the jobs are failed.
func TestFailIfUnchanged_ReasonLongerThanAVarcharColumnStillFailsTheJobs(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.IntID) // failure_reason varchar(200)
	ctx := context.Background()
	id := jobs.Insert(t, fixture.Job{Generation: 1})
	snap, err := jobset.New(jobs.Guard).Snapshot(ctx, env.Pool, []string{id})
	require.NoError(t, err)

	reason := strings.Repeat("é", 300) + "\x00"
	res, err := jobset.New(jobs.Guard).FailIfUnchanged(ctx, env.Pool, []jobset.Job{snap[id]}, reason)
	require.NoError(t, err)
	require.Len(t, res.Failed, 1)
	row := jobs.Read(t, id)
	require.Equal(t, jobs.Table.Statuses.Failed, row.Status)
	require.Equal(t, strings.Repeat("é", 200), row.Reason)
}

// Every reclaim writes Shared.ReclaimedReason and every start guard looks
// for it whole: one longer than the failure-reason column is refused when
// the guard is made, not found out at the first reclaim.
func TestNewWithConfig_RefusesAReclaimedReasonLongerThanTheColumn(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.IntID) // failure_reason varchar(200)
	_, err := jobguard.NewWithConfig(context.Background(), env.Pool, jobs.Table,
		jobguard.GuardConfig{Shared: jobguard.Shared{ReclaimedReason: "reclaimed: " + strings.Repeat("ü", 190)}})
	require.ErrorIs(t, err, jobguard.ErrUnstorable)
	require.ErrorContains(t, err, "Shared.ReclaimedReason")
	require.ErrorContains(t, err, "character varying(200)")

	_, err = jobguard.NewWithConfig(context.Background(), env.Pool, jobs.Table,
		jobguard.GuardConfig{Shared: jobguard.Shared{ReclaimedReason: "reclaimed: " + strings.Repeat("ü", 189)}})
	require.NoError(t, err, "200 characters fit, however many bytes they take")
}

// Every write sets a status: a status label longer than the status column
// holds is refused when the guard is made, not at the first write.
func TestNew_RefusesAStatusLongerThanTheColumn(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.IntID) // status varchar(16)
	table := jobs.Table
	table.Statuses.Failed = "FAILED_AFTER_RETRIES"
	_, err := jobguard.New(context.Background(), env.Pool, table)
	require.ErrorContains(t, err, "StatusColumn")
	require.ErrorContains(t, err, `"FAILED_AFTER_RETRIES"`)
}
