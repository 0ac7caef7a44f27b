package reclaim_test

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/reclaim"
)

// panickingRule runs rule, but panics while broken is set when one of its
// jobs has the parent bad: a rule with a bug for one parent.
func panickingRule(rule reclaim.ParentRule, bad string, broken *atomic.Bool) reclaim.ParentRule {
	return func(ctx context.Context, tx pgx.Tx, jobs []jobset.Job) error {
		if broken.Load() && slices.ContainsFunc(jobs, func(j jobset.Job) bool { return j.ParentID == bad }) {
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
		SweepTimeout: testenv.Patience, // a deadline a loaded machine meets
		Logger:       sw.Logger(), MeterProvider: sw.MeterProvider(),
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
	case <-time.After(testenv.Patience):
		t.Fatal("Run did not return after its context ended")
	}
}

// refusingRule fails, by an error or a panic, for a page that holds bad,
// and writes nothing otherwise.
func refusingRule(bad string, panics bool) reclaim.ParentRule {
	return func(_ context.Context, _ pgx.Tx, jobs []jobset.Job) error {
		if !slices.ContainsFunc(jobs, func(j jobset.Job) bool { return j.ID == bad }) {
			return nil
		}
		if panics {
			panic("boom")
		}
		return errors.New("parent refused")
	}
}

// A table without a type column lists every job under the empty type, and
// its parent rule is OnReclaim[""]. A rule of that type that fails, by an
// error or a panic, holds back only the job it failed for: the empty type
// is a type like any other, not "no rule failed".
func TestSweep_UntypedTableRuleThatFailsHoldsBackOnlyItsJob(t *testing.T) {
	t.Parallel()
	for _, panics := range []bool{false, true} {
		t.Run(fmt.Sprintf("panics=%v", panics), func(t *testing.T) {
			t.Parallel()
			env := testenv.New(t)
			jobs := fixture.Create(t, env, fixture.NoGeneration)
			require.Empty(t, jobs.Table.TypeColumn)
			bad := jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
			good := jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
			started := time.Now().Add(-2 * time.Hour)
			r, logs := newReclaimer(t, jobs, reclaim.Config{
				Source:    listSource{{ID: bad, StartedAt: started}, {ID: good, StartedAt: started}},
				Limits:    reclaim.StaticLimits{"": 30 * time.Minute},
				OnReclaim: map[string]reclaim.ParentRule{"": refusingRule(bad, panics)},
			})

			rep, err := r.Sweep(context.Background())
			require.NoError(t, err, "one job's rule does not fail the page; logs:\n%s", logs)
			require.Equal(t, []string{good}, rep.ReclaimedIDs)
			require.Equal(t, 1, rep.RuleErrors)
			require.Equal(t, "FAILED", jobs.Read(t, good).Status)
			require.Equal(t, "PROCESSING", jobs.Read(t, bad).Status)
		})
	}
}

// openRowsRule runs rule, but for a page that holds bad it leaves a query's
// rows open on the transaction and then panics, returns an error, or
// returns nil, as how says: the connection is busy until those rows are
// closed, which nobody can do.
func openRowsRule(rule reclaim.ParentRule, bad, how string) reclaim.ParentRule {
	return func(ctx context.Context, tx pgx.Tx, jobs []jobset.Job) error {
		if !slices.ContainsFunc(jobs, func(j jobset.Job) bool { return j.ParentID == bad }) {
			return rule(ctx, tx, jobs)
		}
		return leaveRowsOpen(ctx, tx, how)
	}
}

// leaveRowsOpen starts a query on tx, leaves its rows open, and panics,
// returns an error or returns nil, as how says.
func leaveRowsOpen(ctx context.Context, tx pgx.Tx, how string) error {
	rows, err := tx.Query(ctx, `SELECT generate_series(1, 100000)`)
	if err != nil {
		return err
	}
	_ = rows // left open
	switch how {
	case "panics":
		panic("boom")
	case "fails":
		return errors.New("gave up half way through its rows")
	}
	return nil
}

// A parent rule that fails, or even returns, while its query's rows are
// still open leaves the reclaim's transaction on a busy connection, where
// no statement can run, not even the rollback to its savepoint. Its job is held back; the
// other jobs of the page, of its type and of others, are reclaimed in a
// transaction that works, with their parents.
func TestSweep_ParentRuleThatFailsWithItsRowsOpenHoldsBackOnlyItsJob(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"panics", "fails", "returns"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			env := testenv.New(t)
			jobs := fixture.Create(t, env, fixture.Default)
			courses(t, env, "poison", "course-a")
			poisoned := jobs.Insert(t, fixture.Job{Generation: 1, ParentID: "poison", UpdatedAgo: 2 * time.Hour})
			a := jobs.Insert(t, fixture.Job{Generation: 1, ParentID: "course-a", UpdatedAgo: 2 * time.Hour})
			video := jobs.Insert(t, fixture.Job{Type: "video", Generation: 1, UpdatedAgo: 2 * time.Hour})
			r, logs := newReclaimer(t, jobs, reclaim.Config{
				Limits:    reclaim.StaticLimits{"chapter": 30 * time.Minute, "video": time.Hour},
				OnReclaim: map[string]reclaim.ParentRule{"chapter": openRowsRule(failCourse(t), "poison", how)},
			})

			rep, err := r.Sweep(context.Background())
			require.NoError(t, err, "logs:\n%s", logs)
			require.ElementsMatch(t, []string{a, video}, rep.ReclaimedIDs)
			require.Equal(t, 1, rep.RuleErrors)
			require.Equal(t, "PROCESSING", jobs.Read(t, poisoned).Status, "not failed without its parent")
			require.False(t, hasMarker(t, jobs, poisoned))
			require.True(t, hasMarker(t, jobs, a))
			status, _, _ := courseStatus(t, env, "course-a")
			require.Equal(t, "FAILED", status)
			status, _, _ = courseStatus(t, env, "poison")
			require.Equal(t, "GENERATING", status)
		})
	}
}

// A logger and a meter that panic cannot undo what a sweep does after its
// reclaim commits: the markers are written and the notices published, the
// report counts the reclaim, and the sweep returns as it would have.
func TestSweep_PanickingLoggerAndMeterSkipNoMarkerOrNotice(t *testing.T) {
	t.Parallel()
	for name, broken := range map[string]func(*panicky.Switch) reclaim.Config{
		"logger": func(sw *panicky.Switch) reclaim.Config { return reclaim.Config{Logger: sw.Logger()} },
		"meter":  func(sw *panicky.Switch) reclaim.Config { return reclaim.Config{MeterProvider: sw.MeterProvider()} },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := testenv.New(t)
			jobs := fixture.Create(t, env, fixture.Default)
			id := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
			var sw panicky.Switch
			pub := &recordingPublisher{}
			cfg := broken(&sw)
			cfg.Notices = pub
			r, _ := newReclaimer(t, jobs, cfg)
			sw.Arm()

			var rep reclaim.Report
			var err error
			require.NotPanics(t, func() { rep, err = r.Sweep(context.Background()) })
			require.NoError(t, err)
			require.Equal(t, []string{id}, rep.ReclaimedIDs)
			require.True(t, hasMarker(t, jobs, id), "the marker is written")
			require.Len(t, pub.got, 1, "the notice is published")
		})
	}
}
