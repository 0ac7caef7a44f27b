package perf

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobguard/jobguard/jobguard"
)

var markerBackends = []jobguard.MarkerBackend{jobguard.MarkersRedis, jobguard.MarkersPostgres}

// BenchmarkLifecycle runs a job's whole life, one job after another on
// one connection, plain and guarded, and reports its round trips per job:
// roundtrips/op in all, pg-roundtrips/op and redis-roundtrips/op apart.
//
//	go test -run '^$' -bench 'Lifecycle$' -benchtime 2000x ./internal/testkit/perf/
func BenchmarkLifecycle(b *testing.B) {
	serial := func(b *testing.B, w *world, life lifecycle) {
		ctx := context.Background()
		ids := w.queued(b, b.N+1)
		if err := life(ctx, ids[0]); err != nil { // warms the statement cache
			b.Fatal(err)
		}
		pg0, r0 := w.count.pg.Load(), w.count.redis.Load()
		b.ResetTimer()
		for i := range b.N {
			if err := life(ctx, ids[i+1]); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		pg, rdb := float64(w.count.pg.Load()-pg0)/float64(b.N), float64(w.count.redis.Load()-r0)/float64(b.N)
		b.ReportMetric(pg+rdb, "roundtrips/op")
		b.ReportMetric(pg, "pg-roundtrips/op")
		b.ReportMetric(rdb, "redis-roundtrips/op")
	}
	b.Run("op=plain", func(b *testing.B) {
		w := newWorld(b, jobguard.MarkersPostgres, 1)
		serial(b, w, w.plain)
	})
	for _, m := range markerBackends {
		b.Run("op=guarded/markers="+m.String(), func(b *testing.B) {
			w := newWorld(b, m, 1)
			serial(b, w, w.guarded)
		})
		b.Run("op=guarded-increment/markers="+m.String(), func(b *testing.B) {
			w := newWorld(b, m, 1)
			serial(b, w, w.guardedInc)
		})
		b.Run("op=settled/markers="+m.String(), func(b *testing.B) {
			w := newWorld(b, m, 1)
			serial(b, w, w.settled)
		})
		b.Run("op=settled-increment/markers="+m.String(), func(b *testing.B) {
			w := newWorld(b, m, 1)
			serial(b, w, w.settledInc)
		})
	}
}

// BenchmarkLifecycleThroughput runs K workers on a pool of K connections
// (K = 8 and 32). Each round (one b.N) is ten turns; in each turn the
// plain, the guarded and the settled lifecycle, each of the last two with
// a counter and with an increment func, finish 100 jobs each, one after
// the other, in an order that turns from turn to turn. A round's rate of
// each is its jobs over its time summed across the turns, so that a burst
// of other load on the machine falls on all of them alike. It reports each
// one's median rate over the rounds and its median ratio to plain, with
// its range. On a shared machine ask for several rounds:
//
//	go test -run '^$' -bench LifecycleThroughput -benchtime 5x ./internal/testkit/perf/
func BenchmarkLifecycleThroughput(b *testing.B) {
	const turns, jobsPerTurn = 10, 100
	for _, k := range []int{8, 32} {
		for _, m := range markerBackends {
			b.Run(fmt.Sprintf("workers=%d/markers=%s", k, m), func(b *testing.B) {
				w := newWorld(b, m, k)
				lives := []lifecycle{w.plain, w.guarded, w.guardedInc, w.settled, w.settledInc}
				for _, life := range lives { // every connection caches its statements
					run(b, life, w.queued(b, 8*k), k)
				}
				rates := make([][]float64, len(lives))
				b.ResetTimer()
				for range b.N {
					b.StopTimer()
					ids := make([][]string, len(lives))
					for n := range lives {
						ids[n] = w.queued(b, turns*jobsPerTurn)
					}
					b.StartTimer()
					spent := make([]time.Duration, len(lives))
					for turn := range turns {
						for j := range lives {
							n := (turn + j) % len(lives)
							spent[n] += run(b, lives[n], ids[n][turn*jobsPerTurn:(turn+1)*jobsPerTurn], k)
						}
					}
					for n := range lives {
						rates[n] = append(rates[n], float64(turns*jobsPerTurn)/spent[n].Seconds())
					}
				}
				b.StopTimer()
				b.ReportMetric(median(rates[0]), "plain-jobs/s")
				for n, name := range []string{"", "guarded", "guarded-increment", "settled", "settled-increment"} {
					if n == 0 {
						continue
					}
					b.ReportMetric(median(rates[n]), name+"-jobs/s")
					ratio := make([]float64, len(rates[n]))
					for i := range ratio {
						ratio[i] = rates[n][i] / rates[0][i]
					}
					b.ReportMetric(median(ratio), name+"-ratio")
					b.ReportMetric(slices.Min(ratio), name+"-ratio-min")
					b.ReportMetric(slices.Max(ratio), name+"-ratio-max")
				}
			})
		}
	}
}

// run runs life over ids with k workers and returns how long they took.
func run(b *testing.B, life lifecycle, ids []string, k int) time.Duration {
	b.Helper()
	ctx := context.Background()
	next := make(chan string, len(ids))
	for _, id := range ids {
		next <- id
	}
	close(next)
	errs := make(chan error, k)
	var wg sync.WaitGroup
	start := time.Now()
	for range k {
		wg.Go(func() {
			for id := range next {
				if err := life(ctx, id); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return elapsed
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
