package settle_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/metrics"
	"github.com/jobguard/jobguard/internal/testkit/metricstest"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
)

func TestMetrics_FinalizesAndRecordsCounted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := metricstest.New(t)
	s := b.settler(t, quick(settle.Config{MeterProvider: r.Provider, MaxAttempts: 1}))

	exec, spec := b.video(t, 100) // settles at once
	_, err := s.Finalize(ctx, b.env.Pool, exec, spec)
	require.NoError(t, err)
	rejected, spec := b.video(t, 100) // rejected: no record
	require.NoError(t, b.jobs.Guard.Fail(ctx, b.env.Pool, rejected, jobguard.ReclaimedReasonDefault))
	_, err = s.Finalize(ctx, b.env.Pool, rejected, spec)
	require.Error(t, err)
	b.pendingRecord(t, s, 100) // pending, then settled by the sweep
	doomed := b.pendingRecord(t, s, 100)
	b.env.Exec(`UPDATE jobs SET status = 'FAILED' WHERE id = $1`, doomed.JobID) // given up

	rep, err := s.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, settle.Report{Taken: 2, Settled: 1, GivenUp: 1, Updates: 1, Accrued: 1}, rep)

	require.Equal(t, map[string]int64{"settled": 1, "not_completed": 1, "pending": 2},
		r.Counts(t, metrics.SettleFinalizes, metrics.KeyResult))
	require.Equal(t, map[string]int64{"settled": 1, "given_up": 1}, r.Counts(t, metrics.SettleRecords, metrics.KeyResult))
	require.Equal(t, map[string]int64{"": 1, "not_completed": 1}, r.Counts(t, metrics.SettleRecords, metrics.KeyReason))
}
