package reclaim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/reclaim"
)

// pagesSource hands the sweep the pages it holds, as they are: empty ones
// included.
type pagesSource [][]reclaim.ActiveJob

func (s pagesSource) Active(_ context.Context, _ reclaim.Query, page func([]reclaim.ActiveJob) error) error {
	for _, p := range s {
		if err := page(p); err != nil {
			return err
		}
	}
	return nil
}

// A source may hand the sweep an empty page, nil or not, at any point: the
// sweep counts nothing for it, sends nothing for it, and goes on with the
// next page.
func TestSweep_EmptyPagesFromASourceAreNoError(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	stuck := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: time.Hour})
	for name, src := range map[string]pagesSource{
		"only empty pages":         {nil, {}},
		"empty pages around a job": {nil, {{ID: stuck, Type: "chapter", StartedAt: time.Now().Add(-time.Hour)}}, {}},
	} {
		r, _ := newReclaimer(t, jobs, reclaim.Config{Source: src, Shadow: true})
		rep, err := r.Sweep(context.Background())
		require.NoError(t, err, name)
		if name == "only empty pages" {
			require.Zero(t, rep.Scanned, name)
			continue
		}
		require.Equal(t, 1, rep.Scanned, name)
		require.Equal(t, 1, rep.WouldReclaim, name)
	}
}

// A sweep with no limits at all, of either spelling, over the jobs table
// itself reads nothing and fails nothing: it says there is nothing to judge
// by.
func TestSweep_NoLimitsAtAllIsNoError(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: time.Hour})
	src, err := reclaim.NewTableSource(jobs.Guard, env.Pool)
	require.NoError(t, err)
	for name, limits := range map[string]reclaim.StaticLimits{"nil": nil, "empty": {}} {
		r, logs := newReclaimer(t, jobs, reclaim.Config{Source: src, Limits: limits})
		rep, err := r.Sweep(context.Background())
		require.NoError(t, err, name)
		require.Zero(t, rep.Scanned, name)
		require.Zero(t, rep.Reclaimed, name)
		require.Contains(t, logs.String(), "level=WARN", name)
	}
}

// A parent rule given jobs without parents, or none, sends nothing and
// leaves the reclaim's transaction usable.
func TestSetParent_NoParentsSendsNothing(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	courses(t, env)
	rule := failCourse(t)
	ctx := context.Background()
	tx, err := env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	for name, jobs := range map[string][]jobset.Job{"nil": nil, "empty": {}, "no parent": {{ID: "1"}}} {
		require.NoError(t, rule(ctx, tx, jobs), name)
	}
	var one int
	require.NoError(t, tx.QueryRow(ctx, `SELECT 1`).Scan(&one))
}
