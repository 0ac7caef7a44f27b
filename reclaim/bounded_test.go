package reclaim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/safe"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
)

// stuck is closed when the test ends: the code below waits for it and
// ignores its context, as a queue client without deadlines does.
type stuck chan struct{}

func newStuck(t *testing.T) stuck {
	s := make(stuck)
	t.Cleanup(func() { close(s) })
	return s
}

type stuckSource struct{ stuck }

func (s stuckSource) Active(context.Context, reclaim.Query, func([]reclaim.ActiveJob) error) error {
	<-s.stuck
	return nil
}

type stuckLimits struct{ stuck }

func (s stuckLimits) Limits(context.Context) (map[string]time.Duration, error) {
	<-s.stuck
	return nil, nil
}

// stuckCounter lists the jobs table, then never finishes counting the
// rows without a start.
type stuckCounter struct {
	*reclaim.TableSource
	stuck
}

func (s stuckCounter) CountUnstarted(context.Context) (int, error) {
	<-s.stuck
	return 0, nil
}

type stuckNotifier struct{ stuck }

func (s stuckNotifier) Publish(context.Context, ...jobguard.Execution) error {
	<-s.stuck
	return nil
}

// sweepWithin runs r.Sweep and fails the test when it has not returned
// within patience: a sweep must not wait for code that ignores its
// context.
func sweepWithin(t *testing.T, r *reclaim.Reclaimer) (reclaim.Report, error) {
	t.Helper()
	type result struct {
		rep reclaim.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := r.Sweep(context.Background())
		done <- result{rep, err}
	}()
	select {
	case res := <-done:
		return res.rep, res.err
	case <-time.After(testenv.Patience):
		t.Fatalf("the sweep did not return in %v: it waits for code that ignores its context", testenv.Patience)
		return reclaim.Report{}, nil
	}
}

// A source or limits that ignore their context cannot hold a sweep past
// its deadline: it abandons them once the deadline and safe.Grace have
// passed, and its error and summary say so.
func TestSweep_SourceOrLimitsThatIgnoreTheirContextAreAbandoned(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]func(stuck) reclaim.Config{
		"source": func(s stuck) reclaim.Config { return reclaim.Config{Source: stuckSource{s}} },
		"limits": func(s stuck) reclaim.Config { return reclaim.Config{Limits: stuckLimits{s}} },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := testenv.New(t)
			jobs := fixture.Create(t, env, fixture.Default)
			c := cfg(newStuck(t))
			c.SweepTimeout = 100 * time.Millisecond
			r, logs := newReclaimer(t, jobs, c)

			_, err := sweepWithin(t, r)
			require.ErrorIs(t, err, safe.ErrAbandoned)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.Contains(t, logs.String(), `level=WARN msg="reclaim: sweep"`)
			require.Contains(t, logs.String(), `abandoned`)
		})
	}
}

// A count of the rows without a start that ignores its context is
// abandoned as well, and noted; the reclaims before it stand.
func TestSweep_CountThatIgnoresItsContextIsAbandonedAndNoted(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	stalled := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
	src, err := reclaim.NewTableSource(jobs.Guard, env.Pool)
	require.NoError(t, err)
	r, logs := newReclaimer(t, jobs, reclaim.Config{
		Source: stuckCounter{src, newStuck(t)}, SweepTimeout: 2 * time.Second,
	})

	rep, _ := sweepWithin(t, r)
	require.Equal(t, []string{stalled}, rep.ReclaimedIDs)
	require.Contains(t, logs.String(), `level=WARN msg="reclaim: sweep"`)
	require.Contains(t, logs.String(), `abandoned`)
}

// A notifier that ignores its context loses its notices, counted as
// notice errors, once its 10 seconds after the commit and safe.Grace have
// passed: the reclaim and its marker stand, and the sweep returns.
func TestSweep_NotifierThatIgnoresItsContextIsAbandoned(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
	r, logs := newReclaimer(t, jobs, reclaim.Config{Notices: stuckNotifier{newStuck(t)}})

	rep, err := sweepWithin(t, r)
	require.NoError(t, err)
	require.Equal(t, []string{id}, rep.ReclaimedIDs)
	require.Equal(t, 1, rep.NoticeErrors)
	require.True(t, hasMarker(t, jobs, id))
	require.Contains(t, logs.String(), `notice_error=`)
	require.Contains(t, logs.String(), `abandoned`)
}
