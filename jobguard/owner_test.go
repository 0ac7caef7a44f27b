package jobguard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/lease"
)

// ownerOf reads a job's owner column; "" for NULL.
func ownerOf(t *testing.T, jobs *fixture.Jobs, id string) string {
	t.Helper()
	var owner *string
	require.NoError(t, jobs.Env.Pool.QueryRow(context.Background(),
		`SELECT lease_id FROM jobs WHERE id = $1`, id).Scan(&owner))
	if owner == nil {
		return ""
	}
	return *owner
}

// ownedSetup is the bundled table, the workers table and a started lease.
func ownedSetup(t *testing.T) (*fixture.Jobs, *lease.Lease) {
	t.Helper()
	env := testenv.New(t)
	env.Exec(lease.Migration)
	jobs := fixture.Create(t, env, fixture.Default)
	l, err := lease.New(env.Pool, lease.Config{})
	require.NoError(t, err)
	require.NoError(t, l.Start(context.Background()))
	t.Cleanup(func() { _ = l.Stop(context.Background()) })
	return jobs, l
}

// Start writes the owner in its own statement, a start without an owner
// clears it, and Retry clears it.
func TestStartGuard_StartWritesTheOwnerAndRetryClearsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	jobs, l := ownedSetup(t)
	db := jobs.Env.Pool
	owned := newStartGuard(t, jobs, jobguard.StartGuardConfig{Owner: l})
	plain := newStartGuard(t, jobs, jobguard.StartGuardConfig{})

	id := jobs.Insert(t, fixture.Job{Status: jobs.Table.Statuses.Queued})
	exec, err := owned.Start(ctx, db, id)
	require.NoError(t, err)
	require.Equal(t, l.ID(), ownerOf(t, jobs, id))

	// A redelivery started by a process that holds no lease claims the
	// job for no process.
	exec2, err := plain.Start(ctx, db, id)
	require.NoError(t, err)
	require.Greater(t, exec2.Generation, exec.Generation)
	require.Empty(t, ownerOf(t, jobs, id))

	_, err = owned.Start(ctx, db, id)
	require.NoError(t, err)
	exec3, err := owned.Start(ctx, db, id)
	require.NoError(t, err)
	require.NoError(t, jobs.Guard.Fail(ctx, db, exec3, "boom"))
	require.Equal(t, l.ID(), ownerOf(t, jobs, id), "a failed job keeps the owner of its last attempt")
	_, err = jobs.Guard.Retry(ctx, db, id)
	require.NoError(t, err)
	require.Empty(t, ownerOf(t, jobs, id), "Retry clears the owner")
}

// A process whose lease has ended starts nothing: the refusal comes
// before any write, wraps the lease's reason, and is retryable.
func TestStartGuard_StartUnderALostLeaseWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	jobs, l := ownedSetup(t)
	db := jobs.Env.Pool
	sg := newStartGuard(t, jobs, jobguard.StartGuardConfig{Owner: l})
	id := jobs.Insert(t, fixture.Job{Status: jobs.Table.Statuses.Queued})
	require.NoError(t, l.Stop(ctx))

	before := jobs.Read(t, id)
	_, err := sg.Start(ctx, db, id)
	require.ErrorIs(t, err, jobguard.ErrOwnerLost)
	require.ErrorIs(t, err, lease.ErrReleased)
	require.False(t, jobguard.IsPermanent(err), "the job is fine: another process may start it")
	require.Equal(t, before, jobs.Read(t, id))
	require.Empty(t, ownerOf(t, jobs, id))
}

// The owner needs its column, and the generation that fences a rescued
// job's old execution out.
func TestNewStartGuard_OwnerNeedsOwnerAndGenerationColumns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	jobs, l := ownedSetup(t)
	for _, tc := range []struct {
		name string
		edit func(*jobguard.Table)
		want string
	}{
		{"no owner column", func(tb *jobguard.Table) { tb.OwnerColumn = "" }, "OwnerColumn"},
		{"no generation column", func(tb *jobguard.Table) { tb.GenerationColumn = "" }, "GenerationColumn"},
	} {
		tb := jobs.Table
		tc.edit(&tb)
		g, err := jobguard.New(ctx, jobs.Env.Pool, tb)
		require.NoError(t, err)
		_, err = jobguard.NewStartGuard(g, nil, jobguard.StartGuardConfig{Owner: l})
		require.ErrorContains(t, err, tc.want, tc.name)
	}
}

// A rescued reason that the start guard would refuse is refused when the
// guard is built.
func TestNewWithConfig_RescuedReasonMustNotLookReclaimed(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	_, err := jobguard.NewWithConfig(context.Background(), env.Pool, jobs.Table, jobguard.GuardConfig{
		Shared: jobguard.Shared{RescuedReason: jobguard.ReclaimedReasonDefault + ": lease"}})
	require.ErrorContains(t, err, "RescuedReason")
	require.False(t, errors.Is(err, jobguard.ErrJobTerminal))
}
