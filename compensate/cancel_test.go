package compensate_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
)

// A cancelled job's execution is treated like a reclaimed one's: its late
// Finalize is rejected and compensates what it made, at once.
func TestFinalize_CancelledJobCompensatesItsArtifacts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.jobs.Insert(t, fixture.Job{Generation: 1})
	exec := jobguard.Execution{JobID: id, Generation: 1}
	file, asset := b.produce(t, exec)
	_, err := b.jobs.Guard.Cancel(ctx, b.env.Pool, id, "wrong video")
	require.NoError(t, err)

	fin, err := b.arts.Finalize(ctx, b.env.Pool, exec, jobguard.FinalizeSpec{})
	require.ErrorIs(t, err, jobguard.ErrJobTerminal)
	require.True(t, fin.Rejected())
	require.Equal(t, map[string]int{file: 1}, b.files.undoneRefs())
	require.False(t, b.assetExists(t, asset))
	require.Equal(t, map[string]string{file: "done", asset: "done"}, b.states(t, exec))
}

// The sweep owes and compensates what the execution of a cancelled job
// made when that execution never finalized (its worker stopped on its
// cancelled context, or died), in every table shape compensate takes;
// an execution of a job that is still running is left alone.
func TestCompensate_SweepCompensatesTheExecutionOfACancelledJob(t *testing.T) {
	t.Parallel()
	for _, v := range []fixture.Variant{fixture.Default, fixture.Prisma, fixture.TextID, fixture.IntID} {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, v)
			ctx := context.Background()
			for _, status := range []string{b.jobs.Table.Statuses.Queued, b.jobs.Table.Statuses.Processing} {
				cancelled := jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: 3, Status: status}), Generation: 3}
				live := jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: 3}), Generation: 3}
				for _, e := range []jobguard.Execution{cancelled, live} {
					require.NoError(t, b.arts.Record(ctx, b.env.Pool, e, "file", fmt.Sprintf("%s/%d", e.JobID, e.Generation)))
				}
				_, err := b.jobs.Guard.Cancel(ctx, b.env.Pool, cancelled.JobID, "")
				require.NoError(t, err)

				rep, err := b.arts.Compensate(ctx)
				require.NoError(t, err)
				require.Equal(t, compensate.Report{Rejected: 1, Compensated: 1}, rep)
				require.Equal(t, "done", only(b.states(t, cancelled)))
				require.Equal(t, "pending", only(b.states(t, live)), "a live execution is never compensated")
			}
		})
	}
}
