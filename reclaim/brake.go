package reclaim

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// Defaults of Brake.
const (
	// BrakeMaxJobsDefault is the most jobs one sweep reclaims in all.
	BrakeMaxJobsDefault = 500
	// BrakeMaxJobsPerTypeDefault is the most jobs of one type one sweep
	// reclaims.
	BrakeMaxJobsPerTypeDefault = 250
	// BrakeMaxShareDefault is the largest share of the running jobs one
	// sweep reclaims in all.
	BrakeMaxShareDefault = 0.5
	// BrakeMaxSharePerTypeDefault is the largest share of the running jobs
	// of one type one sweep reclaims.
	BrakeMaxSharePerTypeDefault = 0.5
	// BrakeShareFloorDefault is the number of reclaims, in all and per
	// type, that the share caps never go below: a deployment that runs
	// three jobs may see all three stall, and no share cap holds them.
	BrakeShareFloorDefault = 20
	// BrakeClockJumpDefault is how far the database's clock may move apart
	// from the reclaimer's between two sweeps before a sweep's evidence is
	// suspect.
	BrakeClockJumpDefault = time.Minute
)

// Brake caps what one sweep may reclaim. A sweep that decides to reclaim
// more than a cap allows, or whose evidence is suspect (the database's
// clock moved apart from the reclaimer's since the last sweep), is braked:
// it reclaims the jobs the caps allow, those stalled longest first (the
// earliest updated_at, then the id), and leaves the others as they are,
// counted in Report.Braked; its Report says why in BrakeReason, its summary
// line is logged at error with braked=N, and the decision braked of
// jobguard.reclaim.decisions counts the jobs held back. The next sweep
// decides afresh: a stall that is real is reclaimed a cap at a time, and an
// operator who has looked may release the brake for one sweep
// (Reclaimer.ReleaseBrake).
//
// The defaults never brake a healthy small deployment: the share caps
// never hold a sweep below ShareFloor reclaims. A negative value turns its
// cap (or check) off; a zero value takes its default.
type Brake struct {
	// MaxJobs is the most jobs one sweep reclaims in all. Defaults to
	// BrakeMaxJobsDefault (500).
	MaxJobs int
	// MaxShare is the largest share of the running jobs one sweep reclaims
	// in all, in (0, 1]. Defaults to BrakeMaxShareDefault (0.5).
	MaxShare float64
	// MaxJobsPerType is the most jobs of one type one sweep reclaims.
	// Defaults to BrakeMaxJobsPerTypeDefault (250).
	MaxJobsPerType int
	// MaxSharePerType is the largest share of the running jobs of one type
	// one sweep reclaims, in (0, 1]. Defaults to
	// BrakeMaxSharePerTypeDefault (0.5).
	MaxSharePerType float64
	// ShareFloor is the number of reclaims, in all and per type, below
	// which the share caps never brake; with the floor off (negative) a
	// share cap still lets one job through a sweep. Defaults to
	// BrakeShareFloorDefault (20).
	ShareFloor int
	// ClockJump is how far the database's clock may move apart from the
	// reclaimer's monotonic clock between two sweeps of one Reclaimer
	// (the time each says passed since the last sweep's reading of a row
	// are compared; Config.Now plays no part, so a step of the
	// reclaimer's own wall clock never brakes),
	// and when they differ by more, every job's runtime and stall are in
	// doubt, and the sweep reclaims nothing. Defaults to
	// BrakeClockJumpDefault (1 minute).
	ClockJump time.Duration
}

// withDefaults fills in every field left at zero.
func (b Brake) withDefaults() Brake {
	if b.MaxJobs == 0 {
		b.MaxJobs = BrakeMaxJobsDefault
	}
	if b.MaxShare == 0 {
		b.MaxShare = BrakeMaxShareDefault
	}
	if b.MaxJobsPerType == 0 {
		b.MaxJobsPerType = BrakeMaxJobsPerTypeDefault
	}
	if b.MaxSharePerType == 0 {
		b.MaxSharePerType = BrakeMaxSharePerTypeDefault
	}
	if b.ShareFloor == 0 {
		b.ShareFloor = BrakeShareFloorDefault
	}
	if b.ClockJump == 0 {
		b.ClockJump = BrakeClockJumpDefault
	}
	return b
}

// validate names the first field New cannot take.
func (b Brake) validate() error {
	for _, s := range []struct {
		field string
		v     float64
	}{{"Brake.MaxShare", b.MaxShare}, {"Brake.MaxSharePerType", b.MaxSharePerType}} {
		switch {
		case math.IsNaN(s.v):
			return fmt.Errorf("%s is not a number; want a share of the running jobs, at most 1 (negative turns it off)", s.field)
		case s.v > 1:
			return fmt.Errorf("%s %v is above 1 (a share of the running jobs; negative turns it off)", s.field, s.v)
		}
	}
	return nil
}

// needsRunning reports whether a share cap could hold back reclaims
// wanted: only then must the running jobs be counted.
func (b Brake) needsRunning(wanted map[string]int) bool {
	total := 0
	for _, n := range wanted {
		total += n
		if b.MaxSharePerType > 0 && n > b.ShareFloor {
			return true
		}
	}
	return b.MaxShare > 0 && total > b.ShareFloor
}

// brakeInput is what the brake rule needs of a sweep.
type brakeInput struct {
	// wanted are the reclaims the sweep decided, by job type.
	wanted map[string]int
	// running are the running jobs, by job type; nil when no share cap
	// could bind (see needsRunning).
	running map[string]int
	// clockDrift is how far the database's clock moved apart from the
	// reclaimer's since the last sweep's reading; zero when unknown.
	clockDrift time.Duration
	// released: an operator released the brake for this sweep.
	released bool
}

// brakeVerdict is the brake rule's answer: how many jobs the sweep may
// reclaim, per type and in all, and why it is braked ("" when it is not).
type brakeVerdict struct {
	perType map[string]int
	total   int
	reason  string
}

// braked reports whether the verdict holds back any job of wanted.
func (v brakeVerdict) braked() bool { return v.reason != "" }

// brakeRule is the brake as a pure function: the caps of b applied to
// what a sweep wants to reclaim. A type's cap is the smaller of
// MaxJobsPerType and its share of the type's running jobs (never below
// ShareFloor); the total's, likewise over every type. A clock that moved
// apart by more than ClockJump holds everything back.
func brakeRule(b Brake, in brakeInput) brakeVerdict {
	v := brakeVerdict{perType: make(map[string]int, len(in.wanted))}
	total := 0
	for typ, n := range in.wanted {
		v.perType[typ] = n
		total += n
	}
	v.total = total
	if in.released {
		return v
	}
	if b.ClockJump > 0 && in.clockDrift.Abs() > b.ClockJump {
		for typ := range v.perType {
			v.perType[typ] = 0
		}
		v.total = 0
		v.reason = fmt.Sprintf("the database's clock moved %v apart from the reclaimer's since the last sweep "+
			"(tolerance %v): every runtime and stall is in doubt", in.clockDrift.Abs().Round(time.Millisecond), b.ClockJump)
		return v
	}
	var reasons []string
	for _, typ := range slices.Sorted(maps.Keys(in.wanted)) {
		n := in.wanted[typ]
		c, why := capOf(b.MaxJobsPerType, b.MaxSharePerType, b.ShareFloor, max(in.running[typ], n))
		if n > c {
			v.perType[typ] = c
			reasons = append(reasons, fmt.Sprintf("%d of %d running jobs of type %q, more than %s", n,
				max(in.running[typ], n), typ, why))
		}
	}
	running := 0
	for _, n := range in.running {
		running += n
	}
	if c, why := capOf(b.MaxJobs, b.MaxShare, b.ShareFloor, max(running, total)); total > c {
		v.total = c
		reasons = append(reasons, fmt.Sprintf("%d of %d running jobs in all, more than %s", total, max(running, total), why))
	}
	v.reason = strings.Join(reasons, "; ")
	return v
}

// capOf is the cap of maxJobs and share of running (never below floor);
// a negative value turns its part off. why names the cap that binds.
func capOf(maxJobs int, share float64, floor, running int) (int, string) {
	c, why := math.MaxInt, ""
	if maxJobs >= 0 {
		c, why = maxJobs, fmt.Sprintf("the cap of %d", maxJobs)
	}
	if share > 0 {
		// A share cap lets at least one job through, the floor off or not:
		// a share rounded down to none would hold a lone real stall for good.
		floor = max(floor, 1)
		if s := max(floor, int(share*float64(running))); s < c {
			c, why = s, fmt.Sprintf("the cap of %d (%v of the running, at least %d)", s, share, floor)
		}
	}
	return c, why
}
