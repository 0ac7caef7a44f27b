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
	ruleError                                                 []metric.AddOption
	ok, failed                                                []metric.RecordOption
}

func newSweepMetrics(mp metric.MeterProvider) *sweepMetrics {
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
		noStartTime: decision(noStartTime.String()),
		sourceError: decision(sourceError.String()),
		unknownType: decision(unknownType.String()),
		withinLimit: decision(withinLimit.String()),
		stale:       decision(stale.String()),
		notActive:   decision(notActive.String()),
		progressing: decision(progressing.String()),
		reclaimed:   decision("reclaimed"),
		lostRace:    decision("lost_race"),
		locked:      decision("locked"),
		ruleError:   decision("rule_error"),
		ok:          metrics.Record(metrics.KeyResult.String("ok")),
		failed:      metrics.Record(metrics.KeyResult.String("error")),
	}
	metrics.Zero(sm.decisions, sm.noStartTime, sm.sourceError, sm.unknownType, sm.withinLimit, sm.stale,
		sm.notActive, sm.progressing, sm.reclaimed, sm.lostRace, sm.locked, sm.ruleError)
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
