package reclaim_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/reclaim"
)

// longest is the longest duration a limit can hold: time.Duration's
// largest value, in whole microseconds (an interval's precision).
const longest = time.Duration(math.MaxInt64) / time.Microsecond * time.Microsecond

// serverHasInfiniteIntervals reports whether the server takes 'infinity'
// as an interval (PostgreSQL 17 or later).
func serverHasInfiniteIntervals(t *testing.T, env *testenv.Env) bool {
	t.Helper()
	var n int
	err := env.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_catalog.pg_settings WHERE name = 'server_version_num' AND setting::int >= 170000`).Scan(&n)
	require.NoError(t, err)
	return n == 1
}

// Every interval the bundled table's CHECK accepts reads back as a limit
// in range: from one microsecond to the longest duration, and anything
// longer (a thousand years, the interval's own maximum, 'infinity') as the
// longest duration, never as a wrapped negative that reclaims every job.
func TestTableLimits_EveryAcceptedIntervalReadsInRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	env.Exec(reclaim.Migration)
	cases := map[string]struct {
		interval string
		want     time.Duration
	}{
		"one_microsecond":      {"1 microsecond", time.Microsecond},
		"one_second":           {"1 second", time.Second},
		"a_month":              {"1 month", 30 * 24 * time.Hour},
		"the_longest":          {"9223372036854775 microseconds", longest},
		"one_past_longest":     {"9223372036854776 microseconds", longest},
		"a_thousand_years":     {"1000 years", longest},
		"300_thousand_years":   {"300000 years", longest},
		"the_longest_interval": {"178000000 years", longest},
		"months_and_days":      {"2000000 days 100000 months", longest},
	}
	if serverHasInfiniteIntervals(t, env) {
		cases["infinity"] = struct {
			interval string
			want     time.Duration
		}{"infinity", longest}
	}
	want := map[string]time.Duration{}
	for typ, c := range cases {
		env.Exec(`INSERT INTO job_type_limits (job_type, max_runtime) VALUES ($1, $2::interval)`, typ, c.interval)
		want[typ] = c.want
	}
	got, err := tableLimits(t, env).Limits(ctx)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// A table of one's own may lack the bundled CHECK. A limit that is not
// positive would make every job of its type overdue at once: the read
// refuses it, naming the type, whatever its spelling.
func TestTableLimits_NonPositiveLimitIsRefusedNamingItsType(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	env.Exec(`CREATE TABLE own_limits (job_type text PRIMARY KEY, max_runtime interval NOT NULL)`)
	limits, err := reclaim.NewTableLimits(reclaim.TableLimitsConfig{DB: env.Pool, Table: "own_limits"})
	require.NoError(t, err)
	bad := []string{"0", "-1 microsecond", "-1 day", "-1000 years", "-178000000 years", "1 day -25 hours"}
	if serverHasInfiniteIntervals(t, env) {
		bad = append(bad, "-infinity")
	}
	for _, interval := range bad {
		env.Exec(`DELETE FROM own_limits`)
		env.Exec(`INSERT INTO own_limits VALUES ('chapter', '1 hour'), ('video', $1::interval)`, interval)
		_, err := limits.Limits(ctx)
		require.Error(t, err, interval)
		require.ErrorContains(t, err, `"video"`, interval)
		require.ErrorContains(t, err, "not positive", interval)
	}
}

// What Set writes reads back as it was, across the whole range.
func TestTableLimits_SetRoundTripsTheWholeRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	env.Exec(reclaim.Migration)
	limits := tableLimits(t, env)
	for _, c := range []struct{ set, want time.Duration }{
		{time.Microsecond, time.Microsecond},
		{time.Microsecond + time.Nanosecond, 2 * time.Microsecond}, // never shorter than asked
		{90*time.Minute + time.Microsecond, 90*time.Minute + time.Microsecond},
		{longest, longest},
		{time.Duration(math.MaxInt64), longest},
	} {
		require.NoError(t, limits.Set(ctx, "chapter", c.set))
		got, err := limits.Limits(ctx)
		require.NoError(t, err)
		require.Equal(t, c.want, got["chapter"], "set %v", c.set)
	}
	for _, d := range []time.Duration{0, time.Nanosecond, 999 * time.Nanosecond, -time.Microsecond, math.MinInt64} {
		require.ErrorContains(t, limits.Set(ctx, "chapter", d), "not positive", "set %v", d)
	}
}

// A type whose limit is a thousand years is, for every purpose, never
// reclaimed: its stalled jobs stay, and so do those of a type whose limit
// is the longest interval the server holds.
func TestSweep_VeryLongLimitReclaimsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	env.Exec(reclaim.Migration)
	env.Exec(`INSERT INTO job_type_limits VALUES ('chapter', '1000 years'), ('export', '30 minutes')`)
	chapter := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
	export := jobs.Insert(t, fixture.Job{Type: "export", Generation: 1, UpdatedAgo: 2 * time.Hour})
	r, _ := newReclaimer(t, jobs, reclaim.Config{Limits: tableLimits(t, env)})

	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{export}, rep.ReclaimedIDs)
	require.Equal(t, "PROCESSING", jobs.Read(t, chapter).Status)

	env.Exec(`INSERT INTO job_type_limits VALUES ('video', '178000000 years')`)
	video := jobs.Insert(t, fixture.Job{Type: "video", Generation: 1, UpdatedAgo: 2 * time.Hour})
	rep, err = r.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Reclaimed)
	require.Equal(t, "PROCESSING", jobs.Read(t, chapter).Status)
	require.Equal(t, "PROCESSING", jobs.Read(t, video).Status)
}

// Limits from code are checked like the table's: a limit that is not
// positive fails the sweep, naming the type, and nothing is reclaimed.
func TestSweep_NonPositiveStaticLimitFailsTheSweepNamingItsType(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
	for _, d := range []time.Duration{0, -time.Nanosecond, -time.Hour, math.MinInt64} {
		r, _ := newReclaimer(t, jobs, reclaim.Config{Limits: reclaim.StaticLimits{"chapter": d, "video": time.Hour}})
		rep, err := r.Sweep(context.Background())
		require.ErrorContains(t, err, `"chapter"`, "limit %v", d)
		require.ErrorContains(t, err, "not positive", "limit %v", d)
		require.Zero(t, rep.Reclaimed)
		require.Equal(t, "PROCESSING", jobs.Read(t, id).Status)
	}
}

// The longest durations in every field of Config still sweep: none of
// them, or their sum, wraps on its way to a server setting.
func TestRun_LongestDurationsInConfigStillLead(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
	r, logs := newReclaimer(t, jobs, reclaim.Config{
		Interval: longest, SweepTimeout: time.Duration(math.MaxInt64), LivenessTimeout: time.Duration(math.MaxInt64),
		NoProgress: time.Minute,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	// Wait for the event itself; the bound only keeps a broken build from
	// hanging.
	for stop := time.Now().Add(2 * time.Minute); jobs.Read(t, id).Status != "FAILED"; {
		require.True(t, time.Now().Before(stop), "the first sweep never reclaimed the job; logs:\n%s", logs)
		time.Sleep(20 * time.Millisecond)
	}
}

// A suggestion is in range whatever the history and the margin: a job
// whose start was stamped a thousand years ago, or a huge margin, suggests
// the longest limit (in whole seconds), never a wrapped negative one, and
// the longest window reads the whole history.
func TestSuggest_OutOfRangeRuntimesSuggestTheLongestLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	jobs, limits, r := suggestSetup(t)
	longestSecond := longest / time.Second * time.Second

	got, err := r.Suggest(ctx, reclaim.SuggestSpec{Types: []string{"chapter"}, Margin: 1e15})
	require.NoError(t, err)
	require.Equal(t, longestSecond, got[0].Suggested)
	got, err = r.Suggest(ctx, reclaim.SuggestSpec{Types: []string{"chapter"}, Window: time.Duration(math.MaxInt64)})
	require.NoError(t, err)
	require.Equal(t, 100, got[0].Completed)

	id := jobs.Insert(t, fixture.Job{Status: "COMPLETED"})
	jobs.Env.Exec(`UPDATE jobs SET started_at = '1000-01-01' WHERE id = $1`, id)
	got, err = r.Suggest(ctx, reclaim.SuggestSpec{Types: []string{"chapter"}})
	require.NoError(t, err)
	require.Equal(t, longest, got[0].Max)
	require.Equal(t, longestSecond, got[0].Suggested)
	require.NoError(t, limits.Set(ctx, "chapter", got[0].Suggested))
	read, err := limits.Limits(ctx)
	require.NoError(t, err)
	require.Equal(t, longestSecond, read["chapter"])
}
