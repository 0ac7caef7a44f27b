package heartbeat

import (
	"context"

	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/internal/metrics"
)

// beatMetrics are a Heartbeat's instrument and its attribute sets, one per
// Result, built once so that counting a beat allocates nothing.
type beatMetrics struct {
	beats    metric.Int64Counter
	byResult [Lost + 1][]metric.AddOption
}

func newBeatMetrics(mp metric.MeterProvider) *beatMetrics {
	m := &beatMetrics{beats: metrics.Counter(metrics.Meter(mp, "heartbeat"), metrics.HeartbeatBeats, "{beat}",
		"Heartbeats offered, by result: written, throttled, lost (the execution lost its job) or failed.")}
	for r := range m.byResult {
		m.byResult[r] = metrics.Add(metrics.KeyResult.String(Result(r).String()))
		metrics.Zero(m.beats, m.byResult[r])
	}
	return m
}

// count counts one beat's result.
func (m *beatMetrics) count(ctx context.Context, r Result) {
	m.beats.Add(ctx, 1, m.byResult[r]...)
}
