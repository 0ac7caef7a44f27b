package reclaim

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBrakeRule(t *testing.T) {
	t.Parallel()
	defaults := Brake{}.withDefaults()
	small := Brake{MaxJobs: 10, MaxJobsPerType: 10, ShareFloor: 5}.withDefaults()
	for name, tc := range map[string]struct {
		brake   Brake
		in      brakeInput
		perType map[string]int
		total   int
		braked  string // a part of the reason; "" when not braked
	}{
		"a healthy small deployment: every running job stalled, below the share floor": {
			brake: defaults, in: brakeInput{wanted: map[string]int{"chapter": 3}, running: map[string]int{"chapter": 3}},
			perType: map[string]int{"chapter": 3}, total: 3,
		},
		"a few of many": {
			brake: defaults, in: brakeInput{wanted: map[string]int{"chapter": 40}, running: map[string]int{"chapter": 1000}},
			perType: map[string]int{"chapter": 40}, total: 40,
		},
		"a mass stall of one type: the share cap": {
			brake: defaults, in: brakeInput{wanted: map[string]int{"chapter": 100}, running: map[string]int{"chapter": 100}},
			perType: map[string]int{"chapter": 50}, total: 50,
			braked: `100 of 100 running jobs of type "chapter", more than the cap of 50 (0.5 of the running, at least 20)`,
		},
		"a mass stall over the count cap": {
			brake: small, in: brakeInput{wanted: map[string]int{"chapter": 100}, running: map[string]int{"chapter": 100}},
			perType: map[string]int{"chapter": 10}, total: 10,
			braked: `100 of 100 running jobs of type "chapter", more than the cap of 10`,
		},
		"each type within its cap, the total over it": {
			brake: small, in: brakeInput{wanted: map[string]int{"chapter": 8, "video": 8}, running: map[string]int{"chapter": 1000, "video": 1000}},
			perType: map[string]int{"chapter": 8, "video": 8}, total: 10,
			braked: `16 of 2000 running jobs in all, more than the cap of 10`,
		},
		"running unknown: the wanted count is the running count": {
			brake:   Brake{MaxJobs: -1, MaxJobsPerType: -1, MaxShare: 0.5, MaxSharePerType: -1, ShareFloor: 5}.withDefaults(),
			in:      brakeInput{wanted: map[string]int{"chapter": 30}},
			perType: map[string]int{"chapter": 30}, total: 15,
			braked: `30 of 30 running jobs in all, more than the cap of 15`,
		},
		"a share cap with the floor off still lets one job through": {
			brake:   Brake{MaxJobs: -1, MaxJobsPerType: -1, MaxShare: 0.5, MaxSharePerType: 0.5, ShareFloor: -1},
			in:      brakeInput{wanted: map[string]int{"chapter": 1}, running: map[string]int{"chapter": 1}},
			perType: map[string]int{"chapter": 1}, total: 1,
		},
		"a tiny share with the floor off: one a sweep": {
			brake:   Brake{MaxJobs: -1, MaxJobsPerType: -1, MaxShare: 0.001, MaxSharePerType: -1, ShareFloor: -1},
			in:      brakeInput{wanted: map[string]int{"chapter": 5}, running: map[string]int{"chapter": 100}},
			perType: map[string]int{"chapter": 5}, total: 1,
			braked: `5 of 100 running jobs in all, more than the cap of 1 (0.001 of the running, at least 1)`,
		},
		"every cap off": {
			brake:   Brake{MaxJobs: -1, MaxJobsPerType: -1, MaxShare: -1, MaxSharePerType: -1, ClockJump: -1},
			in:      brakeInput{wanted: map[string]int{"chapter": 100000}, clockDrift: time.Hour},
			perType: map[string]int{"chapter": 100000}, total: 100000,
		},
		"the database's clock jumped: nothing": {
			brake: defaults, in: brakeInput{wanted: map[string]int{"chapter": 2}, clockDrift: time.Hour},
			perType: map[string]int{"chapter": 0}, total: 0,
			braked: "the database's clock moved 1h0m0s apart from the reclaimer's",
		},
		"the database's clock jumped back: nothing": {
			brake: defaults, in: brakeInput{wanted: map[string]int{"chapter": 2}, clockDrift: -2 * time.Minute},
			perType: map[string]int{"chapter": 0}, total: 0,
			braked: "moved 2m0s apart",
		},
		"a drift within the tolerance": {
			brake: defaults, in: brakeInput{wanted: map[string]int{"chapter": 2}, clockDrift: time.Minute},
			perType: map[string]int{"chapter": 2}, total: 2,
		},
		"released: everything, whatever the caps and the clock": {
			brake: small, in: brakeInput{wanted: map[string]int{"chapter": 100}, clockDrift: time.Hour, released: true},
			perType: map[string]int{"chapter": 100}, total: 100,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v := brakeRule(tc.brake, tc.in)
			require.Equal(t, tc.perType, v.perType)
			require.Equal(t, tc.total, v.total)
			require.Equal(t, tc.braked != "", v.braked(), v.reason)
			require.Contains(t, v.reason, tc.braked)
		})
	}
}

// The running jobs are counted only when a share cap could bind.
func TestBrake_NeedsRunning(t *testing.T) {
	t.Parallel()
	b := Brake{}.withDefaults()
	require.False(t, b.needsRunning(nil))
	require.False(t, b.needsRunning(map[string]int{"chapter": 10, "video": 10}))
	require.True(t, b.needsRunning(map[string]int{"chapter": 11, "video": 10}), "21 in all")
	require.True(t, b.needsRunning(map[string]int{"chapter": 21}))
	off := Brake{MaxShare: -1, MaxSharePerType: -1}.withDefaults()
	require.False(t, off.needsRunning(map[string]int{"chapter": 1000}))
}

func TestBrakeValidate_ShareOutOfRange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		brake Brake
		want  string
	}{
		{Brake{MaxShare: math.NaN()}, "Brake.MaxShare is not a number"},
		{Brake{MaxSharePerType: math.NaN()}, "Brake.MaxSharePerType is not a number"},
		{Brake{MaxShare: 1.5}, "Brake.MaxShare 1.5 is above 1"},
		{Brake{MaxSharePerType: math.Inf(1)}, "Brake.MaxSharePerType +Inf is above 1"},
	} {
		require.ErrorContains(t, tc.brake.withDefaults().validate(), tc.want)
	}
	require.NoError(t, Brake{MaxShare: -1, MaxSharePerType: 1}.withDefaults().validate())
}
