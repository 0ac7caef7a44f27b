package compensate

import (
	"context"

	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/internal/metrics"
)

// compensateMetrics are an Artifacts' instrument and its attribute sets,
// built once by New.
type compensateMetrics struct {
	compensations metric.Int64Counter
	done, pending []metric.AddOption
}

func newCompensateMetrics(mp metric.MeterProvider) *compensateMetrics {
	result := func(r string) []metric.AddOption { return metrics.Add(metrics.KeyResult.String(r)) }
	m := &compensateMetrics{
		compensations: metrics.Counter(metrics.Meter(mp, "compensate"), metrics.Compensations, "{artifact}",
			"Compensation attempts, by result: done (undone and marked done) or pending (the compensator failed; still owed)."),
		done:    result("done"),
		pending: result("pending"),
	}
	metrics.Zero(m.compensations, m.done, m.pending)
	return m
}

// attempted counts one compensation attempt.
func (m *compensateMetrics) attempted(ctx context.Context, undoErr error) {
	if undoErr != nil {
		m.compensations.Add(ctx, 1, m.pending...)
		return
	}
	m.compensations.Add(ctx, 1, m.done...)
}
