package reclaim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
)

// A mapping that leaves the type column out gives every job the type "",
// which no per-type limit matches: the sweep says so in words, counts them
// apart, and never lists the empty name as nothing among the types without
// a limit.
func TestSweep_JobsWithoutATypeAreNamedInWords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
	tbl := jobs.Table
	tbl.TypeColumn = ""
	untyped, err := jobguard.NewWithConfig(ctx, env.Pool, tbl, jobguard.GuardConfig{Shared: jobs.Guard.Shared()})
	require.NoError(t, err)
	src, err := reclaim.NewTableSource(untyped, env.Pool)
	require.NoError(t, err)
	r, logs := newReclaimer(t, jobs, reclaim.Config{Guard: untyped, Source: src}) // chapter: 30 minutes

	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, reclaim.Report{Scanned: 1, UnknownType: 1, Untyped: 1}, rep)
	require.Contains(t, logs.String(), `level=WARN msg="reclaim: sweep"`)
	require.Contains(t, logs.String(), `1 jobs have no type: the mapping has no Table.TypeColumn`)
	require.NotContains(t, logs.String(), `types_without_limit=[]`)
}
