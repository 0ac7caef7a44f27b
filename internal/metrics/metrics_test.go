package metrics_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/metrics"
	"github.com/jobguard/jobguard/internal/testkit/panicky"
)

func TestInstruments_ARecordingThatPanicsIsDropped(t *testing.T) {
	t.Parallel()
	var sw panicky.Switch
	m := metrics.Meter(sw.MeterProvider(), "test")
	c := metrics.Counter(m, "c", "{x}", "a counter")
	h := metrics.Histogram(m, "h", "a histogram")
	sw.Arm()
	require.NotPanics(t, func() {
		c.Add(context.Background(), 1)
		metrics.Zero(c, nil)
		h.Record(context.Background(), 1.5)
	})
}
