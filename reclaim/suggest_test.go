package reclaim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/reclaim"
)

// suggestSetup is a jobs table with a hundred completions of 1 to 100
// minutes, a running job of a type that never finished, and the limits
// table with a limit of 30 minutes for chapters.
func suggestSetup(t *testing.T) (*fixture.Jobs, *reclaim.TableLimits, *reclaim.Reclaimer) {
	t.Helper()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	env.Exec(reclaim.Migration)
	for i := 1; i <= 100; i++ {
		id := jobs.Insert(t, fixture.Job{Status: "COMPLETED"})
		jobs.Backdate(t, id, "updated_at", time.Hour)
		jobs.Backdate(t, id, "started_at", time.Hour+time.Duration(i)*time.Minute)
	}
	jobs.Insert(t, fixture.Job{Type: "video", UpdatedAgo: time.Minute})
	limits, err := reclaim.NewTableLimits(reclaim.TableLimitsConfig{DB: env.Pool})
	require.NoError(t, err)
	require.NoError(t, limits.Set(context.Background(), "chapter", 30*time.Minute))
	r, _ := newReclaimer(t, jobs, reclaim.Config{Limits: limits})
	return jobs, limits, r
}

// A suggestion is a percentile of the completions times a margin, never
// below the longest completion unless asked, with the work the current
// limit puts at risk beside it; a type with no completion gets none.
func TestSuggest_PercentileTimesMarginNeverBelowTheLongest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, r := suggestSetup(t)

	got, err := r.Suggest(ctx, reclaim.SuggestSpec{})
	require.NoError(t, err)
	require.Len(t, got, 2, "the types of the limits and of the running jobs")
	ch := got[0]
	require.Equal(t, "chapter", ch.Type)
	require.Equal(t, 100, ch.Completed)
	require.Equal(t, 30*time.Minute, ch.Limit)
	require.Equal(t, 70, ch.OverLimit, "31 to 100 minutes ran past the 30-minute limit")
	// p99 = 1 + 0.99 × 99 = 99.01 minutes; × 1.5 = 148.515 minutes, rounded up.
	require.InDelta(t, 8911, ch.Suggested.Seconds(), 2)
	require.Zero(t, ch.Suggested%time.Second)
	require.Equal(t, "video", got[1].Type)
	require.Zero(t, got[1].Completed)
	require.Zero(t, got[1].Suggested, "no completion, no suggestion")

	// The median plainly would put the longer half at risk: the longest
	// completion is the floor.
	got, err = r.Suggest(ctx, reclaim.SuggestSpec{Types: []string{"chapter"}, Percentile: 0.5, Margin: 1})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.InDelta(t, (100 * time.Minute).Seconds(), got[0].Suggested.Seconds(), 2)
	got, err = r.Suggest(ctx, reclaim.SuggestSpec{Types: []string{"chapter"}, Percentile: 0.5, Margin: 1, BelowLongest: true})
	require.NoError(t, err)
	require.InDelta(t, 3030, got[0].Suggested.Seconds(), 2, "50.5 minutes")

	for field, spec := range map[string]reclaim.SuggestSpec{
		"Margin":     {Margin: 0.5},
		"Percentile": {Percentile: 2},
		"Window":     {Window: -time.Hour},
		"PerType":    {PerType: -1},
	} {
		_, err := r.Suggest(ctx, spec)
		require.ErrorContains(t, err, field)
	}
}

// Suggest writes nothing; applying a suggestion is TableLimits.Set, which
// the next sweep reads.
func TestTableLimits_SetAppliesASuggestion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, limits, r := suggestSetup(t)
	got, err := r.Suggest(ctx, reclaim.SuggestSpec{Types: []string{"chapter"}})
	require.NoError(t, err)
	before, err := limits.Limits(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]time.Duration{"chapter": 30 * time.Minute}, before, "suggesting changed no limit")

	require.NoError(t, limits.Set(ctx, "chapter", got[0].Suggested))
	require.NoError(t, limits.Set(ctx, "video", 90*time.Minute+time.Microsecond))
	after, err := limits.Limits(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]time.Duration{"chapter": got[0].Suggested, "video": 90*time.Minute + time.Microsecond}, after)
	require.ErrorContains(t, limits.Set(ctx, "video", 0), "not positive")
	require.ErrorContains(t, limits.Set(ctx, "video", -time.Second), "not positive")
}

// On a first adoption (no limit set, no job running) the types come from
// the history: every type that finished within the window gets a
// suggestion, and one that rests on fewer completions than MinCompletions
// is marked tentative. A type that finished only before the window is
// left out.
func TestSuggest_FirstAdoptionSuggestsForEveryTypeWithHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	env.Exec(reclaim.Migration)
	finished := func(typ, status string, ago, ran time.Duration) {
		id := jobs.Insert(t, fixture.Job{Type: typ, Status: status})
		jobs.Backdate(t, id, "updated_at", ago)
		jobs.Backdate(t, id, "started_at", ago+ran)
	}
	for i := 1; i <= 100; i++ {
		finished("chapter", "COMPLETED", time.Hour, time.Duration(i)*time.Minute)
	}
	for i := 1; i <= 3; i++ {
		finished("video", "COMPLETED", time.Hour, time.Duration(i)*time.Hour)
	}
	finished("export", "FAILED", time.Hour, time.Minute)
	finished("legacy", "COMPLETED", 30*24*time.Hour, time.Minute)
	limits, err := reclaim.NewTableLimits(reclaim.TableLimitsConfig{DB: env.Pool})
	require.NoError(t, err)
	r, _ := newReclaimer(t, jobs, reclaim.Config{Limits: limits})

	got, err := r.Suggest(ctx, reclaim.SuggestSpec{})
	require.NoError(t, err)
	var types []string
	for _, s := range got {
		types = append(types, s.Type)
	}
	require.Equal(t, []string{"chapter", "export", "video"}, types, "the types that finished within the window")
	require.NotZero(t, got[0].Suggested)
	require.False(t, got[0].Tentative, "a hundred completions")
	require.Equal(t, 1, got[1].Failed)
	require.Zero(t, got[1].Suggested, "no completion, no suggestion")
	require.False(t, got[1].Tentative, "no suggestion to doubt")
	require.Equal(t, 3, got[2].Completed)
	require.Equal(t, 4*time.Hour+28*time.Minute+12*time.Second, got[2].Suggested, "p99 = 2.98 hours, × 1.5")
	require.True(t, got[2].Tentative, "three completions are fewer than %d", reclaim.SuggestMinCompletionsDefault)

	got, err = r.Suggest(ctx, reclaim.SuggestSpec{MinCompletions: 3})
	require.NoError(t, err)
	require.False(t, got[2].Tentative)
}
