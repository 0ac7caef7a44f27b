// Package benchkit measures an operation beside its floor in one benchmark:
// the two run in interleaved rounds, so that a machine whose load moves
// during the run moves both, and the ratio of each round is reported with
// its median, least and greatest. It counts the round trips a pgx
// connection makes (each statement, and each batch, is one) and the Go
// allocations of each operation.
package benchkit

import (
	"context"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Large reports whether the large sizes of the benchmarks run: set
// JOBGUARD_BENCH_LARGE=1. They take minutes to set up.
func Large() bool {
	v, _ := strconv.ParseBool(os.Getenv("JOBGUARD_BENCH_LARGE"))
	return v
}

// RoundTrips is a pgx tracer that counts round trips: every statement
// (Exec, Query, QueryRow, BEGIN and COMMIT included) and every batch,
// which pgx sends and reads as one.
type RoundTrips struct{ n atomic.Int64 }

var (
	_ pgx.QueryTracer = (*RoundTrips)(nil)
	_ pgx.BatchTracer = (*RoundTrips)(nil)
)

// Load returns the round trips counted so far.
func (c *RoundTrips) Load() int64 { return c.n.Load() }

// TraceQueryStart counts a statement.
func (c *RoundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

// TraceQueryEnd does nothing.
func (c *RoundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart counts a batch.
func (c *RoundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}

// TraceBatchQuery does nothing: the batch was counted.
func (c *RoundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd does nothing.
func (c *RoundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// Op is one operation of a round.
type Op struct {
	// Name names the operation in the reported metrics.
	Name string
	// Reset runs before each run of Run, untimed: it puts back what the
	// last run changed. Defaults to nothing.
	Reset func() error
	// Run is the operation, timed.
	Run func() error
	// Versus names the op whose time in the same round this op's ratio is
	// taken to. Defaults to the first op, the floor.
	Versus string
}

// Rounds runs every op once per benchmark iteration, each after its Reset,
// in an order that rotates from round to round, and reports for each op
// its median time (name-ms), the round trips trips counted per run
// (name-trips), and its allocations per unit (name-allocs/unit,
// name-B/unit: unit is, say, a reclaimed job, of which a run handles
// units). For each op after the first, which is the floor, it reports
// the ratio of its time to the floor's (or its Versus's) in the same
// round: median, least and greatest (name/floor, name/floor-min,
// name/floor-max). ns/op is the second op's median (the operation
// measured against the floor).
func Rounds(b *testing.B, trips *RoundTrips, units int, unit string, ops ...Op) {
	b.Helper()
	took := make([][]time.Duration, len(ops))
	tripsOf := make([]int64, len(ops))
	allocs := make([]uint64, len(ops))
	bytes := make([]uint64, len(ops))
	rounds := 0
	var ms runtime.MemStats
	for range b.N {
		for k := range ops {
			i := (k + rounds) % len(ops)
			op := ops[i]
			if op.Reset != nil {
				if err := op.Reset(); err != nil {
					b.Fatalf("%s: reset: %v", op.Name, err)
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&ms)
			mallocs, total := ms.Mallocs, ms.TotalAlloc
			before := trips.Load()
			start := time.Now()
			err := op.Run()
			d := time.Since(start)
			tripsOf[i] += trips.Load() - before
			runtime.ReadMemStats(&ms)
			allocs[i] += ms.Mallocs - mallocs
			bytes[i] += ms.TotalAlloc - total
			if err != nil {
				b.Fatalf("%s: %v", op.Name, err)
			}
			took[i] = append(took[i], d)
		}
		rounds++
	}
	n := float64(rounds)
	for i, op := range ops {
		b.ReportMetric(float64(median(took[i]))/1e6, op.Name+"-ms")
		b.ReportMetric(float64(tripsOf[i])/n, op.Name+"-trips")
		if units > 0 {
			b.ReportMetric(float64(allocs[i])/n/float64(units), op.Name+"-allocs/"+unit)
			b.ReportMetric(float64(bytes[i])/n/float64(units), op.Name+"-B/"+unit)
		}
		if i == 0 {
			continue
		}
		versus := 0
		if op.Versus != "" {
			versus = slices.IndexFunc(ops, func(o Op) bool { return o.Name == op.Versus })
			if versus < 0 {
				b.Fatalf("%s: no op %q to compare with", op.Name, op.Versus)
			}
		}
		ratios := make([]float64, rounds)
		for r := range rounds {
			ratios[r] = float64(took[i][r]) / float64(took[versus][r])
		}
		slices.Sort(ratios)
		name := op.Name + "/" + ops[versus].Name
		b.ReportMetric(ratios[len(ratios)/2], name)
		b.ReportMetric(ratios[0], name+"-min")
		b.ReportMetric(ratios[len(ratios)-1], name+"-max")
	}
	if len(ops) > 1 {
		b.ReportMetric(float64(median(took[1])), "ns/op")
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
