package settle

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/internal/metrics"
)

// settleMetrics are a Settler's instruments and their attribute sets, built
// once by New.
type settleMetrics struct {
	finalizes metric.Int64Counter
	records   metric.Int64Counter
	duration  metric.Float64Histogram

	settled, pending, notCompleted []metric.AddOption
	// byResult holds the attribute sets of jobguard.settle.records, keyed
	// by result and, for retrying and given_up, reason.
	byResult   map[[2]string][]metric.AddOption
	ok, failed []metric.RecordOption
}

func newSettleMetrics(mp metric.MeterProvider) *settleMetrics {
	m := metrics.Meter(mp, "settle")
	result := func(r string) []metric.AddOption { return metrics.Add(metrics.KeyResult.String(r)) }
	met := &settleMetrics{
		finalizes: metrics.Counter(m, metrics.SettleFinalizes, "{finalize}",
			"Finalizes by result: settled (confirmed and billed at once), pending (completed; left to the sweep) or not_completed (no record)."),
		records: metrics.Counter(m, metrics.SettleRecords, "{record}",
			"The settle sweep's outcome for each record it took: settled, raced, retrying or given_up, with a reason for the last two."),
		duration: metrics.Histogram(m, metrics.SettleSweepDuration,
			"Duration of each settle sweep, by result (ok, error)."),
		settled:      result("settled"),
		pending:      result("pending"),
		notCompleted: result("not_completed"),
		byResult:     map[[2]string][]metric.AddOption{},
		ok:           metrics.Record(metrics.KeyResult.String("ok")),
		failed:       metrics.Record(metrics.KeyResult.String("error")),
	}
	for _, r := range []string{"settled", "raced"} {
		met.byResult[[2]string{r, ""}] = result(r)
	}
	for _, r := range []string{"retrying", "given_up"} {
		for _, why := range []string{"failed", "unregistered", "exhausted", "not_completed"} {
			met.byResult[[2]string{r, why}] = metrics.Add(metrics.KeyResult.String(r), metrics.KeyReason.String(why))
		}
	}
	metrics.Zero(met.finalizes, met.settled, met.pending, met.notCompleted)
	for _, opts := range met.byResult {
		metrics.Zero(met.records, opts)
	}
	return met
}

func (m *settleMetrics) finalized(ctx context.Context, opts []metric.AddOption) {
	m.finalizes.Add(ctx, 1, opts...)
}

// attempted counts one record's attempt.
func (m *settleMetrics) attempted(ctx context.Context, a attemptResult) {
	key := [2]string{a.result(), ""}
	if key[0] == "retrying" || key[0] == "given_up" {
		key[1] = a.reason()
	}
	m.records.Add(ctx, 1, m.byResult[key]...)
}

// swept records one sweep's duration.
func (m *settleMetrics) swept(ctx context.Context, err error, took time.Duration) {
	opts := m.ok
	if err != nil {
		opts = m.failed
	}
	m.duration.Record(ctx, took.Seconds(), opts...)
}
