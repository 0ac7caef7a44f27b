package heartbeat_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/jobguard/jobguard/heartbeat"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

// The throttled path is what a progress callback hits thousands of times a
// second. Its baselines are the two things it cannot avoid: reading the
// clock, and reading the clock plus one concurrent map lookup.
func BenchmarkThrottled(b *testing.B) {
	env := testenv.New(b)
	jobs := fixture.Create(b, env, fixture.Default)
	ctx := context.Background()
	id := jobs.Insert(b, fixture.Job{Generation: 1})
	exec := jobguard.Execution{JobID: id, Generation: 1}
	ev := heartbeat.Progress(50)

	b.Run("beat", func(b *testing.B) {
		hb := heartbeat.New(jobs.Guard, heartbeat.Config{})
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
	b.Run("baseline=time.Now", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = time.Now()
		}
	})
	b.Run("baseline=time.Now+sync.Map.Load", func(b *testing.B) {
		var m sync.Map
		m.Store(id, new(atomic.Int64))
		b.ReportAllocs()
		for b.Loop() {
			now := time.Now().UnixNano()
			v, _ := m.Load(id)
			_ = now < v.(*atomic.Int64).Load()
		}
	})
}

// BenchmarkThrottledParallel beats 10,000 distinct jobs from every core.
func BenchmarkThrottledParallel(b *testing.B) {
	env := testenv.New(b)
	jobs := fixture.Create(b, env, fixture.Default)
	ctx := context.Background()
	execs := make([]jobguard.Execution, 10_000)
	for i := range execs {
		execs[i] = jobguard.Execution{JobID: uuid.NewString(), Generation: 1}
	}
	ev := heartbeat.Output(1)

	b.Run("beat", func(b *testing.B) {
		hb := heartbeat.New(jobs.Guard, heartbeat.Config{})
		// Claim every job's slot. The writes themselves do not matter here
		// and fail at once on a closed pool; the slots are taken all the same.
		closed := closedPool(env)
		for _, exec := range execs {
			_, _ = hb.Beat(ctx, closed, exec, ev)
		}
		var written atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if res, _ := hb.Beat(ctx, env.Pool, execs[i%len(execs)], ev); res != heartbeat.Throttled {
					written.Add(1)
				}
				i += 7
			}
		})
		if written.Load() != 0 {
			b.Fatalf("%d beats were not throttled", written.Load())
		}
	})
	b.Run("baseline=time.Now+sync.Map.Load", func(b *testing.B) {
		var m sync.Map
		for _, exec := range execs {
			m.Store(exec.JobID, new(atomic.Int64))
		}
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				now := time.Now().UnixNano()
				v, _ := m.Load(execs[i%len(execs)].JobID)
				_ = now < v.(*atomic.Int64).Load()
				i += 7
			}
		})
	})
}

// BenchmarkWrite is a beat that writes (the clock moves an interval between
// beats) beside the plain UPDATE a worker would run without a guard.
func BenchmarkWrite(b *testing.B) {
	env := testenv.New(b)
	jobs := fixture.Create(b, env, fixture.Default)
	ctx := context.Background()
	id := jobs.Insert(b, fixture.Job{Generation: 1})
	exec := jobguard.Execution{JobID: id, Generation: 1}

	b.Run("beat", func(b *testing.B) {
		c := &clock{}
		hb := heartbeat.New(jobs.Guard, heartbeat.Config{Now: c.Now})
		b.ReportAllocs()
		for b.Loop() {
			c.Advance(heartbeat.IntervalDefault)
			if res, err := hb.Beat(ctx, env.Pool, exec, heartbeat.Progress(50)); res != heartbeat.Written {
				b.Fatalf("beat: %v %v", res, err)
			}
		}
	})
	b.Run("baseline=plain-update", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tag, err := env.Pool.Exec(ctx, `UPDATE jobs SET updated_at = now() WHERE id = $1`, id)
			if err != nil || tag.RowsAffected() != 1 {
				b.Fatalf("update: %v %v", tag, err)
			}
		}
	})
}
