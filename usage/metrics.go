package usage

import (
	"context"

	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/internal/metrics"
)

// ledgerMetrics are a Ledger's instrument and its attribute sets, built
// once by NewLedger.
type ledgerMetrics struct {
	accruals                         metric.Int64Counter
	accrued, duplicate, notConfirmed []metric.AddOption
}

func newLedgerMetrics(mp metric.MeterProvider) *ledgerMetrics {
	result := func(r string) []metric.AddOption { return metrics.Add(metrics.KeyResult.String(r)) }
	m := &ledgerMetrics{
		accruals: metrics.Counter(metrics.Meter(mp, "usage"), metrics.UsageAccruals, "{accrual}",
			"Accrual attempts, by result: accrued, duplicate (billed before; nothing done) or not_confirmed (refused)."),
		accrued:      result("accrued"),
		duplicate:    result("duplicate"),
		notConfirmed: result("not_confirmed"),
	}
	metrics.Zero(m.accruals, m.accrued, m.duplicate, m.notConfirmed)
	return m
}

func (m *ledgerMetrics) count(ctx context.Context, opts []metric.AddOption) {
	m.accruals.Add(ctx, 1, opts...)
}
