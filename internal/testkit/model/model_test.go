package model

import (
	"context"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
)

// DurationEnv bounds how long TestModel draws sequences, in total: each
// table shape gets its share, one after the other.
const DurationEnv = "JOBGUARD_MODEL_DURATION"

// durationDefault keeps the model inside the normal test command.
const durationDefault = 15 * time.Second

func duration(t *testing.T) time.Duration {
	s := os.Getenv(DurationEnv)
	if s == "" {
		return durationDefault
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration such as 10m", DurationEnv, s)
	}
	return d
}

// enoughChecks lets the deadline, not rapid's default of 100 checks, end a
// run, unless -rapid.checks (or RAPID_CHECKS) says otherwise.
func enoughChecks() {
	set := os.Getenv("RAPID_CHECKS") != ""
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if !set {
		_ = flag.Set("rapid.checks", "100000")
	}
}

func TestModel(t *testing.T) {
	enoughChecks()
	d := duration(t)
	share := d / time.Duration(len(shapes))
	var tl tally
	t.Cleanup(func() {
		t.Logf("model: %d sequences, %d steps, %d faults injected, %d invariants checked, %d failures (%s in all); "+
			"reclaim sweeps reclaimed %d jobs, skipped %d held rows, %d failed parent rules, left %d of paused types "+
			"and %d of types in shadow; "+
			"%d settle attempts parked, %d released after their record moved on; "+
			"artifacts undone %d, rechecked %d, spared %d; watched executions cancelled by a notice %d, by the check %d; "+
			"leases ended %d, jobs rescued %d, writes of their old executions %d; jobs cancelled %d; reclaims braked %d",
			tl.sequences.Load(), tl.steps.Load(), tl.faults.Load(), tl.invariants.Load(), tl.failures.Load(), d,
			tl.reclaimed.Load(), tl.locked.Load(), tl.ruleErrors.Load(), tl.paused.Load(), tl.shadowed.Load(), tl.parked.Load(), tl.outlived.Load(),
			tl.undone.Load(), tl.rechecked.Load(), tl.spared.Load(), tl.byNotice.Load(), tl.byCheck.Load(),
			tl.leasesEnded.Load(), tl.rescued.Load(), tl.comebacks.Load(), tl.cancels.Load(), tl.braked.Load())
	})
	for i, v := range shapes {
		simple := i%2 == 1
		zone := fixture.TimeZones[(i+1)%len(fixture.TimeZones)]
		name := v.Name
		if simple {
			name += "/simple-protocol"
		}
		name += "/" + strings.ReplaceAll(zone, "/", "-")
		if failFast() && t.Failed() {
			t.Skipf("-failfast: skipping the shapes after the first that failed")
		}
		t.Run(name, func(t *testing.T) {
			defer func() {
				if t.Failed() {
					tl.failures.Add(1)
				}
			}()
			w := newWorld(t, v, simple, zone)
			setServerVersion(t, w)
			w.began = time.Now()
			deadline := w.began.Add(share)
			rapid.Check(t, func(rt *rapid.T) {
				if time.Now().After(deadline) && !w.failing.Load() {
					return
				}
				run(rt, w, &tl)
			})
		})
	}
}

// shapes are the table shapes the model runs on: fixture's, and the one
// with an int4 id and nullable optional columns.
var shapes = append(append([]fixture.Variant{}, fixture.Variants...), fixture.Int4Nullable)

func failFast() bool {
	f := flag.Lookup("test.failfast")
	return f != nil && f.Value.String() == "true"
}

// run is one sequence against w.
func run(rt *rapid.T, w *world, tl *tally) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := w.reset(ctx); err != nil {
		rt.Fatalf("reset: %v", err)
	}
	defer func() {
		if r := recover(); r != nil {
			if !w.failing.Swap(true) {
				w.t.Logf("model: first failure in sequence %d, %s after the shape's start", w.sequences, time.Since(w.began).Round(time.Millisecond))
			}
			panic(r)
		}
	}()
	m := newMachine(ctx, w, tl)
	defer m.unpark()
	defer m.unwatch()
	defer m.stopLeases()
	m.startLeases(rt)
	w.cur = m
	w.sequences++
	tl.sequences.Add(1)
	m.setLimits(rt)
	// The compensate sweeper's clock, off by more than RecheckAfter either
	// way, or by a year: when a recheck is due is the database's business.
	m.ref.clocks[sweeperClock] = rapid.SampledFrom([]time.Duration{0, 2 * recheckAfter, -2 * recheckAfter,
		365 * 24 * time.Hour}).Draw(rt, "sweeper clock")
	for n := rapid.IntRange(1, 4).Draw(rt, "jobs"); n > 0; n-- {
		m.insert(rt)
	}
	for n := rapid.IntRange(0, 3).Draw(rt, "starts"); n > 0; n-- {
		m.start(rt)
	}
	rt.Repeat(m.actions())
}

func setServerVersion(t *testing.T, w *world) {
	var n int
	if err := w.env.Pool.QueryRow(context.Background(), `SELECT current_setting('server_version_num')::int`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	serverNewer = n >= 160000
	serverInfinity = n >= 170000
}
