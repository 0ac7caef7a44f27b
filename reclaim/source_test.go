package reclaim_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/reclaim"
)

// A PROCESSING row without a start time is never listed by the table
// source, so no sweep can reclaim it: every sweep counts it instead, in
// Report.NoStartTime and its summary line, at warn, whatever its type (one
// with a limit, one without, none at all), so that it is never invisible.
// A QUEUED row without a start is waiting, not lost, and a finished one is
// done: neither is counted.
func TestSweep_TableSourceCountsActiveRowsWithoutAStart(t *testing.T) {
	t.Parallel()
	for _, v := range []fixture.Variant{fixture.Default, fixture.Prisma} {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env := testenv.New(t)
			jobs := fixture.Create(t, env, v)
			unstart := func(id string) {
				env.Exec(fmt.Sprintf("UPDATE %s SET %s = NULL WHERE %s = $1", jobs.Table.QualifiedName(),
					ident.Quote(jobs.Table.StartedAtColumn), ident.Quote(jobs.Table.IDColumn)), id)
			}
			for _, typ := range []string{"chapter", "chapter", "video", "no-such-type"} {
				unstart(jobs.Insert(t, fixture.Job{Type: typ, Generation: 1, UpdatedAgo: 2 * time.Hour}))
			}
			unstart(jobs.Insert(t, fixture.Job{Status: "QUEUED"}))
			unstart(jobs.Insert(t, fixture.Job{Status: "COMPLETED", UpdatedAgo: 2 * time.Hour}))
			unstart(jobs.Insert(t, fixture.Job{Status: "FAILED", UpdatedAgo: 2 * time.Hour}))
			stalled := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
			r, logs := newReclaimer(t, jobs, reclaim.Config{})

			rep, err := r.Sweep(ctx)
			require.NoError(t, err)
			require.Equal(t, reclaim.Report{Scanned: 1, NoStartTime: 4, Reclaimed: 1, ReclaimedIDs: []string{stalled}}, rep)
			require.Contains(t, logs.String(), `level=WARN msg="reclaim: sweep"`)
			require.Contains(t, logs.String(), "no_start_time=4")
			require.Contains(t, logs.String(), "never reclaimed")

			// A plan counts them too, and a sweep counts them again: they
			// stay visible until they are started or finished.
			plan, err := r.Plan(ctx)
			require.NoError(t, err)
			require.Equal(t, 4, plan.Report.NoStartTime)
			rep, err = r.Sweep(ctx)
			require.NoError(t, err)
			require.Equal(t, 4, rep.NoStartTime)
		})
	}
}

// unstartedFails is a table source whose count of the rows without a
// start fails.
type unstartedFails struct{ *reclaim.TableSource }

func (unstartedFails) CountUnstarted(context.Context) (int, error) {
	return 0, errors.New("count refused")
}

// A count that fails does not fail the sweep, whose reclaims stand: the
// summary names it, at warn.
func TestSweep_FailedCountOfRowsWithoutAStartIsNotedNotFatal(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	stalled := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
	src, err := reclaim.NewTableSource(jobs.Guard, env.Pool)
	require.NoError(t, err)
	r, logs := newReclaimer(t, jobs, reclaim.Config{Source: unstartedFails{src}})

	rep, err := r.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{stalled}, rep.ReclaimedIDs)
	require.Contains(t, logs.String(), `level=WARN msg="reclaim: sweep"`)
	require.Contains(t, logs.String(), `no_start_time_error="count refused"`)
}
