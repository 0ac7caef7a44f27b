package retain

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/internal/metrics"
)

// retainMetrics are a Sweeper's instruments and their attribute sets,
// built once by New.
type retainMetrics struct {
	rows     metric.Int64Counter
	duration metric.Float64Histogram
	// byTable holds the attribute set of each table, in Config order.
	byTable    [][]metric.AddOption
	ok, failed []metric.RecordOption
}

func newRetainMetrics(mp metric.MeterProvider, tables []string) *retainMetrics {
	m := metrics.Meter(mp, "retain")
	met := &retainMetrics{
		rows: metrics.Counter(m, metrics.RetainRows, "{row}",
			"Rows the retention sweep removed, by table."),
		duration: metrics.Histogram(m, metrics.RetainSweepDuration,
			"Duration of each retention sweep, by result (ok, error)."),
		ok:     metrics.Record(metrics.KeyResult.String("ok")),
		failed: metrics.Record(metrics.KeyResult.String("error")),
	}
	for _, t := range tables {
		opts := metrics.Add(metrics.KeyTable.String(t))
		met.byTable = append(met.byTable, opts)
		metrics.Zero(met.rows, opts)
	}
	return met
}

func (m *retainMetrics) removed(ctx context.Context, table int, n int64) {
	if n > 0 {
		m.rows.Add(ctx, n, m.byTable[table]...)
	}
}

func (m *retainMetrics) swept(ctx context.Context, err error, took time.Duration) {
	opts := m.ok
	if err != nil {
		opts = m.failed
	}
	m.duration.Record(ctx, took.Seconds(), opts...)
}
