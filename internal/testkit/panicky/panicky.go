// Package panicky is hooks that panic: a logger and a meter provider a test
// hands to a background loop, to show that the loop and its process live
// on when the code it calls for its logs and its metrics panics. Each
// panics only once armed, so that building the thing under test (which
// records its zero counters) still works.
package panicky

import (
	"context"
	"log/slog"
	"sync/atomic"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Switch arms the hooks built from it; the zero value is disarmed.
type Switch struct{ on atomic.Bool }

// Arm makes every hook of s panic from now on.
func (s *Switch) Arm() { s.on.Store(true) }

// Disarm makes them work again.
func (s *Switch) Disarm() { s.on.Store(false) }

func (s *Switch) check(what string) {
	if s.on.Load() {
		panic("panicky: the " + what + " broke")
	}
}

// Logger returns a logger whose every record, at any level, panics while
// s is armed, and is dropped otherwise.
func (s *Switch) Logger() *slog.Logger { return slog.New(handler{s}) }

type handler struct{ s *Switch }

func (h handler) Enabled(context.Context, slog.Level) bool { return true }
func (h handler) Handle(context.Context, slog.Record) error {
	h.s.check("logger")
	return nil
}
func (h handler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h handler) WithGroup(string) slog.Handler      { return h }

// MeterProvider returns a provider whose counters and histograms panic on
// every recording while s is armed.
func (s *Switch) MeterProvider() metric.MeterProvider { return provider{s: s} }

type provider struct {
	noop.MeterProvider
	s *Switch
}

func (p provider) Meter(string, ...metric.MeterOption) metric.Meter { return meter{s: p.s} }

type meter struct {
	noop.Meter
	s *Switch
}

func (m meter) Int64Counter(string, ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return counter{s: m.s}, nil
}

func (m meter) Float64Histogram(string, ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	return histogram{s: m.s}, nil
}

type counter struct {
	noop.Int64Counter
	s *Switch
}

func (c counter) Add(context.Context, int64, ...metric.AddOption) { c.s.check("meter") }

type histogram struct {
	noop.Float64Histogram
	s *Switch
}

func (h histogram) Record(context.Context, float64, ...metric.RecordOption) { h.s.check("meter") }
