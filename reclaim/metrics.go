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

	noStartTime, sourceError, unknownType, withinLimit, stale []metric.AddOption
	notActive, progressing, reclaimed, lostRace, locked       []metric.AddOption
	ruleError, wouldReclaim                                   []metric.AddOption
	ok, failed                                                []metric.RecordOption
}

// newSweepMetrics builds the instruments; a shadow reclaimer's series of
// would_reclaim starts at zero, a live one's is never recorded.
func newSweepMetrics(mp metric.MeterProvider, shadow bool) *sweepMetrics {
	m := metrics.Meter(mp, "reclaim")
	decision := func(d string) []metric.AddOption { return metrics.Add(metrics.KeyDecision.String(d)) }
	sm := &sweepMetrics{
		decisions: metrics.Counter(m, metrics.ReclaimDecisions, "{job}",
			"The reclaimer's decision for each scanned job, one value per Report counter."),
		markerErrors: metrics.Counter(m, metrics.ReclaimMarkerErrors, "{job}",
			"Reclaimed jobs whose Redis marker could not be written; the database reason still refuses them."),
		noticeErrors: metrics.Counter(m, metrics.ReclaimNoticeErrors, "{job}",
			"Reclaimed jobs whose notice could not be published; watchers find them at their next check."),
		duration: metrics.Histogram(m, metrics.ReclaimSweepDuration,
			"Duration of each sweep, by result (ok, error)."),
		noStartTime:  decision(DecisionNoStartTime.String()),
		sourceError:  decision(DecisionSourceError.String()),
		unknownType:  decision(DecisionUnknownType.String()),
		withinLimit:  decision(DecisionWithinLimit.String()),
		stale:        decision(DecisionStale.String()),
		notActive:    decision(DecisionNotActive.String()),
		progressing:  decision(DecisionProgressing.String()),
		reclaimed:    decision("reclaimed"),
		lostRace:     decision("lost_race"),
		locked:       decision("locked"),
		ruleError:    decision("rule_error"),
		wouldReclaim: decision("would_reclaim"),
		ok:           metrics.Record(metrics.KeyResult.String("ok")),
		failed:       metrics.Record(metrics.KeyResult.String("error")),
	}
	metrics.Zero(sm.decisions, sm.noStartTime, sm.sourceError, sm.unknownType, sm.withinLimit, sm.stale,
		sm.notActive, sm.progressing, sm.reclaimed, sm.lostRace, sm.locked, sm.ruleError)
	if shadow {
		metrics.Zero(sm.decisions, sm.wouldReclaim)
	}
	metrics.Zero(sm.markerErrors, nil)
	metrics.Zero(sm.noticeErrors, nil)
	return sm
}

// swept records one sweep: its duration and every count of its report. A
// failed sweep's report counts the decisions it made before it failed.
func (m *sweepMetrics) swept(ctx context.Context, rep Report, err error, took time.Duration) {
	for _, c := range []struct {
		n    int
		opts []metric.AddOption
	}{
		{rep.NoStartTime, m.noStartTime}, {rep.SourceErrors, m.sourceError},
		{rep.UnknownType, m.unknownType}, {rep.WithinLimit, m.withinLimit},
		{rep.Stale, m.stale}, {rep.NotActive, m.notActive}, {rep.Progressing, m.progressing},
		{rep.Reclaimed, m.reclaimed}, {rep.LostRace, m.lostRace},
		{rep.Locked, m.locked}, {rep.RuleErrors, m.ruleError},
		{rep.WouldReclaim, m.wouldReclaim},
	} {
		if c.n > 0 {
			m.decisions.Add(ctx, int64(c.n), c.opts...)
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
