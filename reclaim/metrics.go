package reclaim

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/internal/metrics"
)

// sweepMetrics are a Reclaimer's instruments and their attribute sets,
// built once by New.
type sweepMetrics struct {
	decisions    metric.Int64Counter
	markerErrors metric.Int64Counter
	noticeErrors metric.Int64Counter
	duration     metric.Float64Histogram

	// decided are the tallies with a label, each with its attribute set.
	decided    []labelled
	ok, failed []metric.RecordOption
}

// labelled is a Report counter and its series of the decisions counter.
type labelled struct {
	count func(*Report) *int
	opts  []metric.AddOption
}

// newSweepMetrics builds the instruments; a shadow reclaimer's series of
// would_reclaim starts at zero, a live one's is never recorded.
func newSweepMetrics(mp metric.MeterProvider, shadow bool) *sweepMetrics {
	m := metrics.Meter(mp, "reclaim")
	sm := &sweepMetrics{
		decisions: metrics.Counter(m, metrics.ReclaimDecisions, "{job}",
			"The reclaimer's decision for each scanned job, one value per Report counter."),
		markerErrors: metrics.Counter(m, metrics.ReclaimMarkerErrors, "{job}",
			"Reclaimed jobs whose Redis marker could not be written; the database reason still refuses them."),
		noticeErrors: metrics.Counter(m, metrics.ReclaimNoticeErrors, "{job}",
			"Reclaimed jobs whose notice could not be published; watchers find them at their next check."),
		duration: metrics.Histogram(m, metrics.ReclaimSweepDuration,
			"Duration of each sweep, by result (ok, error)."),
		ok:     metrics.Record(metrics.KeyResult.String("ok")),
		failed: metrics.Record(metrics.KeyResult.String("error")),
	}
	for _, t := range tallies {
		if t.label == "" {
			continue
		}
		l := labelled{count: t.count, opts: metrics.Add(metrics.KeyDecision.String(t.label))}
		sm.decided = append(sm.decided, l)
		if !t.shadow || shadow {
			metrics.Zero(sm.decisions, l.opts)
		}
	}
	metrics.Zero(sm.markerErrors, nil)
	metrics.Zero(sm.noticeErrors, nil)
	return sm
}

// swept records one sweep: its duration and every count of its report. A
// failed sweep's report counts the decisions it made before it failed.
func (m *sweepMetrics) swept(ctx context.Context, rep Report, err error, took time.Duration) {
	for _, l := range m.decided {
		if n := *l.count(&rep); n > 0 {
			m.decisions.Add(ctx, int64(n), l.opts...)
		}
	}
	if rep.MarkerErrors > 0 {
		m.markerErrors.Add(ctx, int64(rep.MarkerErrors))
	}
	if rep.NoticeErrors > 0 {
		m.noticeErrors.Add(ctx, int64(rep.NoticeErrors))
	}
	opts := m.ok
	if err != nil {
		opts = m.failed
	}
	m.duration.Record(ctx, took.Seconds(), opts...)
}
