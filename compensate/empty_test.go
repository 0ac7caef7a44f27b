package compensate_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
)

// An empty ref names nothing, and would be the same ref for every
// execution of its kind: one execution's pending artifact would spare
// another's owed one. It is refused, like an empty kind, before anything
// is written.
func TestRecord_EmptyRefOrKindIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	exec := jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
	require.ErrorContains(t, b.arts.Record(ctx, b.env.Pool, exec, "file", ""), "compensate: record: ref is empty")
	require.ErrorContains(t, b.arts.Record(ctx, b.env.Pool, exec, "", "a"), `no compensator for kind ""`)
	require.Empty(t, b.states(t, exec))
}

// Nothing to compensate is no error anywhere: a sweep of an empty table, an
// execution that recorded nothing, and a finalize of one with an empty spec.
func TestCompensate_NothingToDoIsANoOp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	rep, err := b.arts.Compensate(ctx)
	require.NoError(t, err)
	require.Equal(t, compensate.Report{}, rep)

	lost := jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
	rep, err = b.arts.CompensateExecution(ctx, lost)
	require.NoError(t, err)
	require.Equal(t, compensate.Report{}, rep)

	exec := jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
	fin, err := b.arts.Finalize(ctx, b.env.Pool, exec, jobguard.FinalizeSpec{})
	require.NoError(t, err)
	require.True(t, fin.Confirmed())
	require.Equal(t, "COMPLETED", b.jobs.Read(t, exec.JobID).Status)

	rep, err = b.arts.Compensate(ctx)
	require.NoError(t, err)
	require.Equal(t, compensate.Report{}, rep)
}
