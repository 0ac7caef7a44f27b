package heartbeat_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/heartbeat"
	"github.com/jobguard/jobguard/internal/metrics"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/metricstest"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

func TestMetrics_BeatsCountedByResult(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	ctx := context.Background()
	db := b.env.Pool
	r := metricstest.New(t)
	hb := heartbeat.New(b.jobs.Guard, heartbeat.Config{Now: b.clock.Now, MeterProvider: r.Provider})
	exec := jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}

	// One write, then three beats inside the interval.
	for range 4 {
		_, _ = hb.Beat(ctx, db, exec, heartbeat.Progress(10))
	}
	// Evidence of no progress is refused without using the slot.
	res, err := hb.Beat(ctx, db, exec, heartbeat.Output(0))
	require.Equal(t, heartbeat.Failed, res)
	require.ErrorIs(t, err, heartbeat.ErrNoEvidence)

	// The job is reclaimed; the next interval's beat finds it lost.
	require.NoError(t, b.jobs.Guard.Fail(ctx, db, exec, jobguard.ReclaimedReasonDefault))
	b.clock.Advance(heartbeat.IntervalDefault)
	res, err = hb.Beat(ctx, db, exec, heartbeat.Poll("running"))
	require.Equal(t, heartbeat.Lost, res)
	require.ErrorIs(t, err, jobguard.ErrJobTerminal)

	// A database that is gone: the write fails.
	other := jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
	res, _ = hb.Beat(ctx, closedPool(b.env), other, heartbeat.Output(3))
	require.Equal(t, heartbeat.Failed, res)

	require.Equal(t, map[string]int64{"written": 1, "throttled": 3, "lost": 1, "failed": 2},
		r.Counts(t, metrics.HeartbeatBeats, metrics.KeyResult))
	require.Equal(t, 2, b.writes(t, exec.JobID), "one heartbeat, then the reclaim")
	require.Zero(t, b.writes(t, other.JobID))
}

// BenchmarkThrottledMetrics is the throttled beat without metrics (a nil
// provider), with metrics recorded into the OpenTelemetry SDK, and the
// SDK's own cost of adding to a counter, as the baseline.
func BenchmarkThrottledMetrics(b *testing.B) {
	env := testenv.New(b)
	jobs := fixture.Create(b, env, fixture.Default)
	ctx := context.Background()
	exec := jobguard.Execution{JobID: jobs.Insert(b, fixture.Job{Generation: 1}), Generation: 1}
	ev := heartbeat.Progress(50)
	r := metricstest.New(b)

	for _, c := range []struct {
		name string
		cfg  heartbeat.Config
	}{
		{"beat/provider=nil", heartbeat.Config{}},
		{"beat/provider=sdk", heartbeat.Config{MeterProvider: r.Provider}},
	} {
		b.Run(c.name, func(b *testing.B) {
			hb := heartbeat.New(jobs.Guard, c.cfg)
			if res, err := hb.Beat(ctx, env.Pool, exec, ev); res != heartbeat.Written {
				b.Fatalf("first beat: %v %v", res, err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if res, _ := hb.Beat(ctx, env.Pool, exec, ev); res != heartbeat.Throttled {
					b.Fatalf("beat: %v", res)
				}
			}
		})
	}
	// From every core, where the SDK's counter is shared by all of them.
	for _, c := range []struct {
		name string
		cfg  heartbeat.Config
	}{
		{"parallel/provider=nil", heartbeat.Config{}},
		{"parallel/provider=sdk", heartbeat.Config{MeterProvider: r.Provider}},
	} {
		b.Run(c.name, func(b *testing.B) {
			hb := heartbeat.New(jobs.Guard, c.cfg)
			if res, err := hb.Beat(ctx, env.Pool, exec, ev); res != heartbeat.Written {
				b.Fatalf("first beat: %v %v", res, err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if res, _ := hb.Beat(ctx, env.Pool, exec, ev); res != heartbeat.Throttled {
						b.Errorf("beat: %v", res)
						return
					}
				}
			})
		})
	}
	b.Run("baseline=sdk-counter-add", func(b *testing.B) {
		c, err := r.Provider.Meter("bench").Int64Counter("bench.adds")
		if err != nil {
			b.Fatal(err)
		}
		opts := metrics.Add(metrics.KeyResult.String("throttled"))
		b.ReportAllocs()
		for b.Loop() {
			c.Add(ctx, 1, opts...)
		}
	})
}

func TestMetrics_HeartbeatsSharingAProviderAddUp(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	ctx := context.Background()
	r := metricstest.New(t)
	one := heartbeat.New(b.jobs.Guard, heartbeat.Config{Now: b.clock.Now, MeterProvider: r.Provider})
	two := heartbeat.New(b.jobs.Guard, heartbeat.Config{Now: b.clock.Now, MeterProvider: r.Provider})
	exec := jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}

	for _, hb := range []*heartbeat.Heartbeat{one, two, one, two, two} {
		_, err := hb.Beat(ctx, b.env.Pool, exec, heartbeat.Output(1))
		require.NoError(t, err)
	}
	require.Equal(t, map[string]int64{"written": 2, "throttled": 3},
		r.Counts(t, metrics.HeartbeatBeats, metrics.KeyResult))
	// Collecting again reports the same totals: they are cumulative, and
	// the heartbeats add up rather than overwrite each other.
	require.Equal(t, int64(3), r.Count(t, metrics.HeartbeatBeats, metrics.KeyResult.String("throttled")))
}
