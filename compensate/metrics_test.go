package compensate_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/internal/metrics"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/metricstest"
	"github.com/jobguard/jobguard/jobguard"
)

func TestMetrics_CompensationsCountedDoneOrPending(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := metricstest.New(t)
	arts, err := compensate.New(ctx, compensate.Config{
		Guard: b.jobs.Guard, DB: b.env.Pool, MeterProvider: r.Provider,
		Compensators: map[string]compensate.Func{"file": b.files.compensate, "asset_row": deleteAsset},
	})
	require.NoError(t, err)
	id := b.jobs.Insert(t, fixture.Job{Generation: 1})
	exec := jobguard.Execution{JobID: id, Generation: 1}
	file, _ := b.produce(t, exec)
	b.files.failLeft[file] = 2
	require.NoError(t, b.jobs.Guard.Fail(ctx, b.env.Pool, exec, jobguard.ReclaimedReasonDefault))

	// The rejected finalize undoes the asset row; the file's store fails.
	_, err = arts.Finalize(ctx, b.env.Pool, exec, jobguard.FinalizeSpec{})
	require.ErrorIs(t, err, jobguard.ErrJobTerminal)
	require.Equal(t, map[string]int64{"done": 1, "pending": 1}, r.Counts(t, metrics.Compensations, metrics.KeyResult))

	// The sweeps fail once more, then undo the file; a third finds nothing.
	for range 3 {
		_, err := arts.Compensate(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, map[string]int64{"done": 2, "pending": 2}, r.Counts(t, metrics.Compensations, metrics.KeyResult))

	// A confirmed finalize keeps its artifacts: nothing to count.
	kept := jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
	b.produce(t, kept)
	_, err = arts.Finalize(ctx, b.env.Pool, kept, jobguard.FinalizeSpec{})
	require.NoError(t, err)
	_, err = arts.Compensate(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"done": 2, "pending": 2}, r.Counts(t, metrics.Compensations, metrics.KeyResult))
}
