package usage_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/metrics"
	"github.com/jobguard/jobguard/internal/testkit/metricstest"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/usage"
)

func TestMetrics_AccrualsDuplicatesAndRefusalsCounted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := metricstest.New(t)
	ledger, err := usage.NewLedger(usage.Config{MeterProvider: r.Provider})
	require.NoError(t, err)

	// Two jobs accrue; one of them is replayed twice.
	first, err := b.finalize(t, "PROCESSING")
	require.NoError(t, err)
	second, err := b.finalize(t, "PROCESSING")
	require.NoError(t, err)
	for _, fin := range []jobguard.Finalized{first, first, first, second} {
		_, err := ledger.Accrue(ctx, b.env.Pool, fin, entry, b.increment(entry.Quantity))
		require.NoError(t, err)
	}
	// A late execution's rejected finalize is refused.
	late, err := b.finalize(t, "FAILED")
	require.Error(t, err)
	_, err = ledger.Accrue(ctx, b.env.Pool, late, entry, b.increment(entry.Quantity))
	require.ErrorIs(t, err, usage.ErrNotConfirmed)
	// An increment that fails accrues nothing and is not counted.
	third, err := b.finalize(t, "PROCESSING")
	require.NoError(t, err)
	_, err = ledger.Accrue(ctx, b.env.Pool, third, entry, func(context.Context, pgx.Tx) error { return errors.New("account locked") })
	require.Error(t, err)

	require.Equal(t, map[string]int64{"accrued": 2, "duplicate": 2, "not_confirmed": 1},
		r.Counts(t, metrics.UsageAccruals, metrics.KeyResult))
	seconds, rows := b.billed(t)
	require.Equal(t, 2*entry.Quantity, seconds)
	require.Equal(t, 2, rows)
}
