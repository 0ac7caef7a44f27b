// Package interval converts durations where they cross between Go and
// PostgreSQL, in one place, so that none of them wraps on the way.
//
// The two sides hold different ranges. A time.Duration counts nanoseconds
// in an int64: about ±292 years. An interval counts months, days and
// microseconds: up to about ±178 million years, and 'infinity' from
// PostgreSQL 17 on. An integer setting (lock_timeout, idle_session_timeout,
// tcp_keepalives_idle) takes at most 2³¹−1 of its unit: about 24.8 days of
// milliseconds. A conversion that ignores these wraps silently: a limit of
// '1000 years' read as microseconds times time.Microsecond is about −169
// years, and every job is over it.
//
// So every crossing goes through this package:
//
//   - An interval read from the database is read as whole microseconds by
//     the SQL of Read, which clamps it first (an interval beyond the range
//     of a duration reads as one microsecond past it), then converted by
//     FromMicros, which clamps it to ±Max and says whether it had to. The
//     caller decides what an out-of-range value means: a limit longer than
//     Max is a limit never reached, and reads as Max.
//   - A duration written to the database travels as whole microseconds
//     (Micros, rounded away from zero so that a timeout or a limit is never
//     shorter than asked) and becomes an interval through the SQL of Param,
//     exactly, with no rounding on the way. Every time.Duration fits both.
//   - A duration that becomes a server setting is rendered by Millis or
//     Keepalive: rounded up, at least 1 (0 turns such a timeout off) and at
//     most the largest value that takes effect.
//   - A duration computed from several configured ones is added by Sum,
//     which saturates instead of wrapping.
//   - A duration of a config is checked by Check, which refuses a negative
//     one, naming the field. Any other duration is in range: every use of
//     it above is.
package interval

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Max is the longest duration that crosses: the longest time.Duration in
// whole microseconds, the precision of an interval, 2562047h47m16.854775s
// (about 292 years).
const Max = time.Duration(math.MaxInt64) / time.Microsecond * time.Microsecond

// maxMicros is Max in microseconds.
const maxMicros = int64(Max / time.Microsecond)

// Read returns SQL that reads the interval expression expr as an int8 of
// whole microseconds, never failing the cast: an interval longer than Max
// ('infinity' and '1000 years' included) reads as one microsecond past Max,
// one shorter than -Max as one before it, so that FromMicros reports it out
// of range. A month is 30 days and a year 365.25, as PostgreSQL's epoch of
// an interval counts them.
func Read(expr string) string {
	return fmt.Sprintf("(greatest(least(extract(epoch FROM %s) * 1000000, %d), %d))::int8",
		expr, maxMicros+1, -maxMicros-1)
}

// Param returns SQL that turns expr, an int8 of microseconds (a $n
// parameter given Micros, or a column of them), into an interval, exactly.
// An int8 times an interval is a float8 times it, exact only up to 2⁵³
// microseconds (about 285 years, short of Max), so the count is split
// into whole hours and the microseconds left: each part, and so their sum,
// is exact for every int8 Micros returns. expr appears twice in the SQL,
// and the SQL holds no '%', so that a caller may format it.
func Param(expr string) string {
	e := "(" + expr + ")::int8"
	return fmt.Sprintf("((%s / %d) * interval '1 hour' + mod(%s, %d) * interval '1 microsecond')",
		e, usPerHour, e, usPerHour)
}

// usPerHour is an hour in microseconds.
const usPerHour = int64(time.Hour / time.Microsecond)

// FromMicros returns us microseconds as a duration, clamped to [-Max, Max];
// inRange is false when it had to clamp.
func FromMicros(us int64) (d time.Duration, inRange bool) {
	switch {
	case us > maxMicros:
		return Max, false
	case us < -maxMicros:
		return -Max, false
	}
	return time.Duration(us) * time.Microsecond, true
}

// FromSeconds returns s seconds as a duration rounded to the microsecond,
// clamped to [-Max, Max]; inRange is false when it had to clamp, and for
// NaN, which returns 0.
func FromSeconds(s float64) (d time.Duration, inRange bool) {
	if math.IsNaN(s) {
		return 0, false
	}
	us := math.Round(s * 1e6)
	switch {
	case us > float64(maxMicros):
		return Max, false
	case us < -float64(maxMicros):
		return -Max, false
	}
	return FromMicros(int64(us))
}

// Micros returns d in whole microseconds, rounded away from zero, so that a
// timeout, a delay or a limit written to the database is never shorter
// than asked. Every time.Duration fits, in an int8 and in an interval.
func Micros(d time.Duration) int64 {
	us := int64(d / time.Microsecond)
	switch r := d % time.Microsecond; {
	case r > 0:
		us++
	case r < 0:
		us--
	}
	return us
}

// maxSetting is the largest value of an integer server setting.
const maxSetting = math.MaxInt32

// Millis renders d for an integer setting counted in milliseconds
// (lock_timeout, statement_timeout, idle_session_timeout,
// tcp_user_timeout): rounded up, at least 1, as 0 turns such a timeout
// off, and at most 2³¹−1 (about 24.8 days), the largest such a setting
// takes.
func Millis(d time.Duration) string { return setting(d, time.Millisecond, maxSetting) }

// maxKeepalive is the longest TCP keepalive time Linux takes, in seconds:
// the server accepts more, and then silently keeps its default.
const maxKeepalive = 32767

// Keepalive renders d for a TCP keepalive setting, counted in seconds
// (tcp_keepalives_idle, tcp_keepalives_interval): rounded up, at least 1,
// and at most 32767 (about 9 hours), the longest the kernel takes; a
// longer one would leave the server's default in place.
func Keepalive(d time.Duration) string { return setting(d, time.Second, maxKeepalive) }

func setting(d, unit time.Duration, most int64) string {
	n := int64(d / unit)
	if d%unit > 0 {
		n++
	}
	return strconv.FormatInt(min(max(n, 1), most), 10)
}

// Sum adds ds, saturating at the longest and the shortest time.Duration
// rather than wrapping: a bound made of configured durations (an interval
// plus a timeout) stays a bound however long they are.
func Sum(ds ...time.Duration) time.Duration {
	var total time.Duration
	for _, d := range ds {
		switch {
		case d > 0 && total > math.MaxInt64-d:
			total = math.MaxInt64
		case d < 0 && total < math.MinInt64-d:
			total = math.MinInt64
		default:
			total += d
		}
	}
	return total
}

// ErrNegative is Check's error for a negative duration.
var ErrNegative = errors.New("is negative")

// Check returns an error naming field when d, a duration of a config, is
// negative; it wraps ErrNegative. Zero (the default) and every positive
// duration are in range.
func Check(field string, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%s %v %w", field, d, ErrNegative)
	}
	return nil
}
