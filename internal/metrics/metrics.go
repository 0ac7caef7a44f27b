// Package metrics holds the names of every OpenTelemetry instrument the
// library records, and the few helpers that build them, so that the packages
// agree on names, units and attributes.
//
// Every package takes an optional metric.MeterProvider. A nil provider means
// the no-op provider: the call sites record unconditionally and cost an
// empty interface call. Attribute sets are built once, when the instruments
// are, and passed as prebuilt option slices, so recording allocates nothing.
package metrics

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// ScopePrefix is the instrumentation scope of each package's meter: the
// package's import path.
const ScopePrefix = "github.com/jobguard/jobguard/"

// Instrument names. They are part of the public contract: dashboards and
// alerts are written against them.
const (
	// Completions counts conditional completions by outcome (accepted,
	// refused, error) and, when refused, reason.
	Completions = "jobguard.completions"
	// StartRefusals counts starts refused as reclaimed, by source (database,
	// marker).
	StartRefusals = "jobguard.start.refusals"
	// StartLookupErrors counts start guard lookups that failed, by lookup
	// (database, marker) and policy (fail-open, fail-closed).
	StartLookupErrors = "jobguard.start.lookup_errors"
	// HeartbeatBeats counts heartbeats by result (written, throttled, lost,
	// failed).
	HeartbeatBeats = "jobguard.heartbeat.beats"
	// ReclaimDecisions counts the reclaimer's decisions per scanned job, one
	// per Report counter (no_start_time, source_error, unknown_type,
	// within_limit, stale, not_active, progressing, reclaimed, lost_race,
	// locked, rule_error, and would_reclaim for a shadow reclaimer).
	ReclaimDecisions = "jobguard.reclaim.decisions"
	// ReclaimMarkerErrors counts reclaimed jobs whose Redis marker could not
	// be written.
	ReclaimMarkerErrors = "jobguard.reclaim.marker_errors"
	// ReclaimNoticeErrors counts reclaimed jobs whose notice could not be
	// published.
	ReclaimNoticeErrors = "jobguard.reclaim.notice_errors"
	// ReclaimSweepDuration is the duration of each sweep in seconds, by
	// result (ok, error).
	ReclaimSweepDuration = "jobguard.reclaim.sweep.duration"
	// UsageAccruals counts accrual attempts by result (accrued, duplicate,
	// not_confirmed).
	UsageAccruals = "jobguard.usage.accruals"
	// Compensations counts compensation attempts by result (done, pending).
	Compensations = "jobguard.compensations"
	// SettleFinalizes counts settle's in-process finalizes by result
	// (settled, pending, not_completed).
	SettleFinalizes = "jobguard.settle.finalizes"
	// SettleRecords counts the settle sweep's outcome for each record it
	// took, by result (settled, raced, retrying, given_up) and, for
	// retrying and given_up, reason (failed, unregistered, exhausted,
	// not_completed).
	SettleRecords = "jobguard.settle.records"
	// SettleSweepDuration is the duration of each settle sweep in seconds,
	// by result (ok, error).
	SettleSweepDuration = "jobguard.settle.sweep.duration"
	// RetainRows counts the rows the retention sweep removed, by table
	// (records, artifacts, markers).
	RetainRows = "jobguard.retain.rows"
	// RetainSweepDuration is the duration of each retention sweep in
	// seconds, by result (ok, error).
	RetainSweepDuration = "jobguard.retain.sweep.duration"
)

// Attribute keys.
const (
	KeyOutcome  = attribute.Key("outcome")
	KeyReason   = attribute.Key("reason")
	KeySource   = attribute.Key("source")
	KeyLookup   = attribute.Key("lookup")
	KeyPolicy   = attribute.Key("policy")
	KeyResult   = attribute.Key("result")
	KeyDecision = attribute.Key("decision")
	KeyTable    = attribute.Key("table")
)

// DurationBuckets are the histogram boundaries, in seconds, of durations
// that span a few milliseconds (an empty sweep) to tens of seconds.
var DurationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Meter returns pkg's meter of mp, or a no-op meter when mp is nil (or
// its Meter panics).
func Meter(mp metric.MeterProvider, pkg string) metric.Meter {
	if mp == nil {
		return noop.Meter{}
	}
	var m metric.Meter
	if err := recovering(func() error { m = mp.Meter(ScopePrefix + pkg); return nil }); err != nil || m == nil {
		return noop.Meter{}
	}
	return m
}

// Counter returns the named counter of m. A provider that cannot create it
// (the names are fixed, so only a broken provider) yields a no-op counter:
// metrics must never stop the guard from working. For the same reason a
// recording that panics is dropped (see recovering).
func Counter(m metric.Meter, name, unit, desc string) metric.Int64Counter {
	var c metric.Int64Counter
	err := recovering(func() (err error) {
		c, err = m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		return err
	})
	if err != nil || c == nil {
		return noop.Int64Counter{}
	}
	return safeCounter{c}
}

// Histogram returns the named histogram of m, in seconds, with
// DurationBuckets. Like Counter, it falls back to a no-op histogram, and
// drops a recording that panics.
func Histogram(m metric.Meter, name, desc string) metric.Float64Histogram {
	var h metric.Float64Histogram
	err := recovering(func() (err error) {
		h, err = m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(DurationBuckets...))
		return err
	})
	if err != nil || h == nil {
		return noop.Float64Histogram{}
	}
	return safeHistogram{h}
}

// recovering runs fn and turns its panic into an error. A meter is the
// caller's code, run by the library's loops right after the state changes
// it counts: a panic there must not skip what follows (the report, the
// summary line, the next item), so a recording that panics is lost, and
// the instruments built here record through this.
func recovering(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("metrics: the meter panicked: %v", p)
		}
	}()
	return fn()
}

// safeCounter is a counter whose Add recovers from a panic of the
// provider's.
type safeCounter struct{ metric.Int64Counter }

func (c safeCounter) Add(ctx context.Context, incr int64, opts ...metric.AddOption) {
	_ = recovering(func() error { c.Int64Counter.Add(ctx, incr, opts...); return nil })
}

// safeHistogram is a histogram whose Record recovers from a panic of the
// provider's.
type safeHistogram struct{ metric.Float64Histogram }

func (h safeHistogram) Record(ctx context.Context, v float64, opts ...metric.RecordOption) {
	_ = recovering(func() error { h.Float64Histogram.Record(ctx, v, opts...); return nil })
}

// Add returns the options that record one attribute set. Build them once
// and pass them with opts...: the call then allocates nothing.
func Add(kv ...attribute.KeyValue) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
}

// Zero records 0 on c for every attribute set of sets, when the
// instruments are built. A series then exists from the process's start, so
// that rate() and increase() in Prometheus see its first event: a series
// that appears at 1 hides that step, and a rare event (a process's first
// late completion) would fire no alert.
func Zero(c metric.Int64Counter, sets ...[]metric.AddOption) {
	// No caller's context exists yet; the value carries no baggage.
	ctx := context.Background()
	for _, set := range sets {
		c.Add(ctx, 0, set...)
	}
}

// Record is Add for histograms.
func Record(kv ...attribute.KeyValue) []metric.RecordOption {
	return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
}
