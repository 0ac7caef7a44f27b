package interval_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/interval"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
)

const (
	longest  = time.Duration(math.MaxInt64)
	shortest = time.Duration(math.MinInt64)
)

func TestMax_IsTheLongestDurationInWholeMicroseconds(t *testing.T) {
	t.Parallel()
	require.Equal(t, "2562047h47m16.854775s", interval.Max.String())
	require.Zero(t, interval.Max%time.Microsecond)
	require.Less(t, longest-interval.Max, time.Microsecond)
}

func TestFromMicros_ClampsBeyondMax(t *testing.T) {
	t.Parallel()
	maxUS := int64(interval.Max / time.Microsecond)
	for _, c := range []struct {
		us      int64
		want    time.Duration
		inRange bool
	}{
		{0, 0, true},
		{1, time.Microsecond, true},
		{-1, -time.Microsecond, true},
		{maxUS, interval.Max, true},
		{-maxUS, -interval.Max, true},
		{maxUS + 1, interval.Max, false},
		{-maxUS - 1, -interval.Max, false},
		{math.MaxInt64, interval.Max, false},
		{math.MinInt64, -interval.Max, false},
		{31_557_600_000_000_000, interval.Max, false}, // a thousand years, which wrapped to about -169
	} {
		got, ok := interval.FromMicros(c.us)
		require.Equal(t, c.want, got, "%d µs", c.us)
		require.Equal(t, c.inRange, ok, "%d µs", c.us)
	}
}

func TestFromSeconds_RoundsToTheMicrosecondAndClamps(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		s       float64
		want    time.Duration
		inRange bool
	}{
		{0, 0, true},
		{1e-6, time.Microsecond, true},
		{1.4e-6, time.Microsecond, true},
		{-1.6e-6, -2 * time.Microsecond, true},
		{5940.6, 99*time.Minute + 600*time.Millisecond, true},
		{1000 * 365.25 * 86400, interval.Max, false},
		{-1e300, -interval.Max, false},
		{math.Inf(1), interval.Max, false},
		{math.Inf(-1), -interval.Max, false},
		{math.NaN(), 0, false},
	} {
		got, ok := interval.FromSeconds(c.s)
		require.Equal(t, c.want, got, "%v s", c.s)
		require.Equal(t, c.inRange, ok, "%v s", c.s)
	}
}

func TestMicros_RoundsAwayFromZeroAndNeverOverflows(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 0},
		{time.Nanosecond, 1},
		{time.Microsecond, 1},
		{time.Microsecond + time.Nanosecond, 2},
		{-time.Nanosecond, -1},
		{-time.Microsecond, -1},
		{interval.Max, int64(interval.Max / time.Microsecond)},
		{longest, int64(interval.Max/time.Microsecond) + 1},
		{shortest, -int64(interval.Max/time.Microsecond) - 1},
	} {
		require.Equal(t, c.want, interval.Micros(c.d), "%v", c.d)
	}
}

func TestSettings_RoundUpAtLeastOneAtMostTheLargestSetting(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		d                 time.Duration
		millis, keepalive string
	}{
		{shortest, "1", "1"},
		{-time.Second, "1", "1"},
		{0, "1", "1"},
		{time.Nanosecond, "1", "1"},
		{time.Millisecond, "1", "1"},
		{time.Millisecond + 1, "2", "1"},
		{10 * time.Second, "10000", "10"},
		{10*time.Second + 1, "10001", "11"},
		{9 * time.Hour, "32400000", "32400"},
		{24 * time.Hour, "86400000", "32767"},
		{25 * 24 * time.Hour, "2147483647", "32767"},
		{interval.Max, "2147483647", "32767"},
		{longest, "2147483647", "32767"},
	} {
		require.Equal(t, c.millis, interval.Millis(c.d), "%v", c.d)
		require.Equal(t, c.keepalive, interval.Keepalive(c.d), "%v", c.d)
	}
}

func TestSum_SaturatesInsteadOfWrapping(t *testing.T) {
	t.Parallel()
	require.Equal(t, time.Duration(0), interval.Sum())
	require.Equal(t, 3*time.Second, interval.Sum(time.Second, 2*time.Second))
	require.Equal(t, longest, interval.Sum(longest, longest, longest))
	require.Equal(t, longest, interval.Sum(longest, time.Nanosecond))
	require.Equal(t, longest, interval.Sum(interval.Max, interval.Max))
	require.Equal(t, shortest, interval.Sum(shortest, -time.Nanosecond))
	require.Equal(t, time.Duration(-1), interval.Sum(longest, shortest))
}

func TestCheck_RefusesNegativeNamingTheField(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, time.Nanosecond, interval.Max, longest} {
		require.NoError(t, interval.Check("Interval", d))
	}
	for _, d := range []time.Duration{-time.Nanosecond, -time.Hour, shortest} {
		err := interval.Check("Interval", d)
		require.ErrorIs(t, err, interval.ErrNegative)
		require.ErrorContains(t, err, "Interval "+d.String()+" is negative")
	}
}

// serverHasInfiniteIntervals reports whether the server takes 'infinity'
// as an interval (PostgreSQL 17 or later).
func serverHasInfiniteIntervals(t *testing.T, env *testenv.Env) bool {
	t.Helper()
	var num int
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT current_setting('server_version_num')::int`).Scan(&num))
	return num >= 170000
}

// Every interval the server holds reads without an error, and as the
// duration it is when a duration can hold it.
func TestRead_EveryIntervalOnTheServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	type readCase struct {
		interval string
		want     time.Duration
		inRange  bool
	}
	cases := []readCase{
		{"0", 0, true},
		{"1 microsecond", time.Microsecond, true},
		{"-1 microsecond", -time.Microsecond, true},
		{"1 hour 30 minutes 0.5 seconds", 90*time.Minute + 500*time.Millisecond, true},
		{"1 month", 30 * 24 * time.Hour, true},
		{"1 day -25 hours", -time.Hour, true},
		{"9223372036854775 microseconds", interval.Max, true},
		{"-9223372036854775 microseconds", -interval.Max, true},
		{"9223372036854776 microseconds", interval.Max, false},
		{"292 years", 106653 * 24 * time.Hour, true}, // of 365.25 days
		{"293 years", interval.Max, false},
		{"1000 years", interval.Max, false},
		{"300000 years", interval.Max, false},
		{"-300000 years", -interval.Max, false},
		{"178000000 years", interval.Max, false},
		{"-178000000 years", -interval.Max, false},
		{"2147483647 days 2147483647 months", interval.Max, false},
	}
	if serverHasInfiniteIntervals(t, env) {
		cases = append(cases, readCase{"infinity", interval.Max, false}, readCase{"-infinity", -interval.Max, false})
	}
	for _, c := range cases {
		var us int64
		err := env.Pool.QueryRow(ctx, `SELECT `+interval.Read("$1::interval"), c.interval).Scan(&us)
		require.NoError(t, err, c.interval)
		got, ok := interval.FromMicros(us)
		require.Equal(t, c.want, got, c.interval)
		require.Equal(t, c.inRange, ok, c.interval)
	}
}

// Every duration written goes in as an interval and reads back as itself,
// rounded away from zero to the microsecond.
func TestParam_EveryDurationRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	for _, c := range []struct {
		d, want time.Duration
	}{
		{0, 0},
		{time.Nanosecond, time.Microsecond},
		{time.Microsecond, time.Microsecond},
		{-time.Nanosecond, -time.Microsecond},
		{90*time.Minute + time.Microsecond, 90*time.Minute + time.Microsecond},
		{interval.Max, interval.Max},
		{interval.Max - time.Microsecond, interval.Max - time.Microsecond},
		// Beyond 2⁵³ µs (about 285 years, still within Max) a float8
		// holds only even counts: each odd one must come back as itself.
		{(1<<53 + 1) * time.Microsecond, (1<<53 + 1) * time.Microsecond},
		{(1<<53 + 3) * time.Microsecond, (1<<53 + 3) * time.Microsecond},
		{-(1<<53 + 1) * time.Microsecond, -(1<<53 + 1) * time.Microsecond},
		{-interval.Max + time.Microsecond, -interval.Max + time.Microsecond},
		{longest, interval.Max},
		{shortest, -interval.Max},
	} {
		var us int64
		var text string
		err := env.Pool.QueryRow(ctx, `SELECT `+interval.Read(interval.Param("$1"))+`, `+interval.Param("$1")+`::text`,
			interval.Micros(c.d)).Scan(&us, &text)
		require.NoError(t, err, c.d)
		got, _ := interval.FromMicros(us)
		require.Equal(t, c.want, got, "%v (%s)", c.d, text)
	}
	// The database's clock takes them too: now() plus the longest.
	var ok bool
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT statement_timestamp() + `+interval.Param("$1")+` > statement_timestamp()`,
		interval.Micros(longest)).Scan(&ok))
	require.True(t, ok)
}

// The settings the library writes take every value Millis and Keepalive
// render, the largest included, and keep it.
func TestSettings_TheServerTakesAndKeepsTheLargest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	conn, err := env.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	for _, s := range []struct{ name, value string }{
		{"lock_timeout", interval.Millis(longest)}, {"statement_timeout", interval.Millis(longest)},
		{"idle_session_timeout", interval.Millis(longest)}, {"tcp_user_timeout", interval.Millis(longest)},
		{"tcp_keepalives_idle", interval.Keepalive(longest)}, {"tcp_keepalives_interval", interval.Keepalive(longest)},
	} {
		var set string
		err := conn.QueryRow(ctx, `SELECT set_config(name, $1, false) FROM pg_settings WHERE name = $2`, s.value, s.name).Scan(&set)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // a server without the setting
		}
		require.NoError(t, err, "%s = %s", s.name, s.value)
		var got string
		require.NoError(t, conn.QueryRow(ctx, `SELECT setting FROM pg_settings WHERE name = $1`, s.name).Scan(&got))
		require.Equal(t, s.value, got, "%s takes effect", s.name)
	}
	// The session is the pool's: leave it as it was.
	_, err = conn.Exec(ctx, `RESET ALL`)
	require.NoError(t, err)
}
