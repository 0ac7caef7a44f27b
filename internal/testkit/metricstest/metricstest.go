// Package metricstest reads the library's metrics in tests through an
// in-memory OpenTelemetry reader. Only test files import it, so the
// OpenTelemetry SDK stays out of the library.
package metricstest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Reader is a meter provider whose measurements a test collects on demand.
type Reader struct {
	// Provider is what the package under test is configured with.
	Provider *sdkmetric.MeterProvider
	reader   *sdkmetric.ManualReader
}

// New returns a Reader that is shut down when t ends.
func New(t testing.TB) *Reader {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return &Reader{Provider: mp, reader: r}
}

// collect returns every metric named name, from every scope.
func (r *Reader) collect(t testing.TB, name string) []metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("metricstest: collect: %v", err)
	}
	var out []metricdata.Metrics
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				out = append(out, m)
			}
		}
	}
	return out
}

// Counts returns the int64 counter name's totals keyed by the value of
// attribute key ("" for points without it). Points with further attributes
// are summed into their key's value. A total of 0 (a series that exists
// from the start but never moved) is left out.
func (r *Reader) Counts(t testing.TB, name string, key attribute.Key) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, m := range r.collect(t, name) {
		sum, ok := m.Data.(metricdata.Sum[int64])
		if !ok {
			t.Fatalf("metricstest: %s is a %T, not an int64 sum", name, m.Data)
		}
		if !sum.IsMonotonic {
			t.Fatalf("metricstest: %s is not monotonic", name)
		}
		for _, dp := range sum.DataPoints {
			v, _ := dp.Attributes.Value(key)
			out[v.AsString()] += dp.Value
		}
	}
	// Every counter starts its known series at 0; a count is what moved.
	for k, n := range out {
		if n == 0 {
			delete(out, k)
		}
	}
	return out
}

// Count returns the int64 counter name's total over the points whose
// attributes are exactly kv.
func (r *Reader) Count(t testing.TB, name string, kv ...attribute.KeyValue) int64 {
	t.Helper()
	want := attribute.NewSet(kv...)
	var n int64
	for _, m := range r.collect(t, name) {
		sum, ok := m.Data.(metricdata.Sum[int64])
		if !ok {
			t.Fatalf("metricstest: %s is a %T, not an int64 sum", name, m.Data)
		}
		for _, dp := range sum.DataPoints {
			if dp.Attributes.Equals(&want) {
				n += dp.Value
			}
		}
	}
	return n
}

// Has reports whether the int64 counter name has a point with exactly the
// attributes kv, whatever its value: a series that exists.
func (r *Reader) Has(t testing.TB, name string, kv ...attribute.KeyValue) bool {
	t.Helper()
	want := attribute.NewSet(kv...)
	for _, m := range r.collect(t, name) {
		sum, ok := m.Data.(metricdata.Sum[int64])
		if !ok {
			t.Fatalf("metricstest: %s is a %T, not an int64 sum", name, m.Data)
		}
		for _, dp := range sum.DataPoints {
			if dp.Attributes.Equals(&want) {
				return true
			}
		}
	}
	return false
}

// Histogram returns how many values the float64 histogram name recorded
// with exactly the attributes kv, and their sum.
func (r *Reader) Histogram(t testing.TB, name string, kv ...attribute.KeyValue) (count uint64, sum float64) {
	t.Helper()
	want := attribute.NewSet(kv...)
	for _, m := range r.collect(t, name) {
		h, ok := m.Data.(metricdata.Histogram[float64])
		if !ok {
			t.Fatalf("metricstest: %s is a %T, not a float64 histogram", name, m.Data)
		}
		for _, dp := range h.DataPoints {
			if dp.Attributes.Equals(&want) {
				count += dp.Count
				sum += dp.Sum
			}
		}
	}
	return count, sum
}

// Unit returns the unit instrument name was created with, or "" when it has
// recorded nothing.
func (r *Reader) Unit(t testing.TB, name string) string {
	t.Helper()
	for _, m := range r.collect(t, name) {
		return m.Unit
	}
	return ""
}
