package reclaim_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/panicky"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
)

// panickingRule runs rule, but panics while broken is set when one of its
// jobs has the parent bad: a rule with a bug for one parent.
func panickingRule(rule reclaim.ParentRule, bad string, broken *atomic.Bool) reclaim.ParentRule {
	return func(ctx context.Context, tx pgx.Tx, jobs []jobguard.JobState) error {
		if broken.Load() && slices.ContainsFunc(jobs, func(j jobguard.JobState) bool { return j.ParentID == bad }) {
			panic("boom")
		}
		return rule(ctx, tx, jobs)
	}
}

// A parent rule that panics fails like one that returns an error: its job
// is held back, counted in RuleErrors and logged with the stack, every
// other job of the page is reclaimed with its parent, and the next sweep
// tries the held job again.
func TestSweep_ParentRuleThatPanicsHoldsBackOnlyItsJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	courses(t, env, "poison", "course-a")
	poisoned := jobs.Insert(t, fixture.Job{Generation: 1, ParentID: "poison", UpdatedAgo: 2 * time.Hour})
	a := jobs.Insert(t, fixture.Job{Generation: 1, ParentID: "course-a", UpdatedAgo: 2 * time.Hour})
	video := jobs.Insert(t, fixture.Job{Type: "video", Generation: 1, UpdatedAgo: 2 * time.Hour})
	var broken atomic.Bool
	broken.Store(true)
	r, logs := newReclaimer(t, jobs, reclaim.Config{
		Limits:    reclaim.StaticLimits{"chapter": 30 * time.Minute, "video": time.Hour},
		OnReclaim: map[string]reclaim.ParentRule{"chapter": panickingRule(failCourse(t), "poison", &broken)},
	})

	var rep reclaim.Report
	var err error
	require.NotPanics(t, func() { rep, err = r.Sweep(ctx) })
	require.NoError(t, err, "a rule's panic is counted, not returned")
	require.ElementsMatch(t, []string{a, video}, rep.ReclaimedIDs)
	require.Equal(t, 1, rep.RuleErrors)
	require.Equal(t, "PROCESSING", jobs.Read(t, poisoned).Status, "not failed without its parent")
	require.False(t, hasMarker(t, jobs, poisoned))
	status, _, _ := courseStatus(t, env, "course-a")
	require.Equal(t, "FAILED", status)
	out := logs.String()
	require.Contains(t, out, `level=WARN msg="reclaim: sweep"`)
	require.Contains(t, out, `panic: boom`)
	require.Contains(t, out, `panickingRule`, "the stack is logged")

	// The next sweep runs, and once the rule is fixed reclaims the job.
	rep, err = r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.RuleErrors)
	broken.Store(false)
	rep, err = r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{poisoned}, rep.ReclaimedIDs)
}

type panickingNotifier struct{}

func (panickingNotifier) Publish(context.Context, ...jobguard.Execution) error { panic("boom") }

// A notifier that panics loses its notices, counted as notice errors: the
// reclaim has committed and its markers are written.
func TestSweep_NotifierThatPanicsIsCountedAsNoticeErrors(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
	r, logs := newReclaimer(t, jobs, reclaim.Config{Notices: panickingNotifier{}})

	var rep reclaim.Report
	var err error
	require.NotPanics(t, func() { rep, err = r.Sweep(context.Background()) })
	require.NoError(t, err)
	require.Equal(t, []string{id}, rep.ReclaimedIDs)
	require.Equal(t, 1, rep.NoticeErrors)
	require.True(t, hasMarker(t, jobs, id))
	require.Contains(t, logs.String(), `notice_error="panic: boom"`)
	require.Contains(t, logs.String(), `panickingNotifier.Publish`, "the stack is logged")
}

type panickingSource struct{}

func (panickingSource) Active(context.Context, reclaim.Query, func([]reclaim.ActiveJob) error) error {
	panic("boom")
}

type panickingLimits struct{}

func (panickingLimits) Limits(context.Context) (map[string]time.Duration, error) { panic("boom") }

// A source or limits that panic fail the sweep, as one that cannot be read
// does: Sweep returns an error wrapping the *PanicError, and writes
// nothing.
func TestSweep_SourceOrLimitsThatPanicAreTheSweepsError(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
	for name, cfg := range map[string]reclaim.Config{
		"source": {Source: panickingSource{}},
		"limits": {Limits: panickingLimits{}},
	} {
		t.Run(name, func(t *testing.T) {
			r, logs := newReclaimer(t, jobs, cfg)
			var err error
			require.NotPanics(t, func() { _, err = r.Sweep(context.Background()) })
			var pe *jobguard.PanicError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "boom", pe.Value)
			require.Equal(t, "PROCESSING", jobs.Read(t, id).Status)
			require.Contains(t, logs.String(), `level=WARN msg="reclaim: sweep"`)
			require.Contains(t, logs.String(), `stack=`)
		})
	}
}

// flakySource panics at every other call, and lists the jobs table at the
// others.
type flakySource struct {
	reclaim.Source
	calls *atomic.Int64
}

func (s flakySource) Active(ctx context.Context, q reclaim.Query, page func([]reclaim.ActiveJob) error) error {
	if s.calls.Add(1)%2 == 1 {
		panic("boom")
	}
	return s.Source.Active(ctx, q, page)
}

// Run goes on through a source, a logger and a meter that panic: the
// leader keeps sweeping, pass after pass, and Run returns when its context
// ends.
func TestRun_PanickingSourceLoggerAndMeterDoNotStopTheSweeps(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	guard := jobs.GuardWith(t, jobguard.Shared{LeaderKey: rand.Int64N(1<<62) + 1})
	table, err := reclaim.NewTableSource(guard, env.Pool)
	require.NoError(t, err)
	var sw panicky.Switch
	var calls atomic.Int64
	r, _ := newReclaimer(t, jobs, reclaim.Config{
		Guard: guard, Source: flakySource{Source: table, calls: &calls}, Interval: 20 * time.Millisecond,
		Logger: sw.Logger(), MeterProvider: sw.MeterProvider(),
	})
	sw.Arm()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	for range 2 { // a later pass runs too
		id := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
		require.Eventually(t, func() bool { return jobs.Read(t, id).Status == "FAILED" }, testenv.Patience, 10*time.Millisecond)
	}
	require.GreaterOrEqual(t, calls.Load(), int64(3), "the source panicked and was called again")
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
