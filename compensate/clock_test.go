package compensate_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
)

// skewedClock is a process clock that runs skew ahead of the machine's
// (behind, when negative).
func skewedClock(skew time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(skew) }
}

// TestRecheck_DueOnTheDatabasesClockWhateverTheProcessesClocks runs the
// recheck of a late upload between two processes, the one that compensates
// first and a sweeper, over every pair of clock skews: behind and ahead by
// RecheckAfter, a day and a century, and none. Whatever their clocks say,
// the recheck comes exactly RecheckAfter after the first compensation by
// the database's clock, never before (an upload still in flight would then
// stay for good) and never later.
func TestRecheck_DueOnTheDatabasesClockWhateverTheProcessesClocks(t *testing.T) {
	t.Parallel()
	const recheck = 15 * time.Minute
	const century = 100 * 365 * 24 * time.Hour
	skews := []time.Duration{-century, -24 * time.Hour, -recheck, 0, recheck, 24 * time.Hour, century}
	lb := setupLate(t)
	ctx := context.Background()

	n := 0
	for _, first := range skews {
		for _, sweeper := range skews {
			n++
			table := fmt.Sprintf("artifacts_%d", n)
			t.Run(fmt.Sprintf("first=%v/sweeper=%v", first, sweeper), func(t *testing.T) {
				t.Parallel()
				_, err := lb.env.Pool.Exec(ctx, `CREATE TABLE `+table+` (LIKE job_artifacts INCLUDING ALL)`)
				require.NoError(t, err)
				process := func(skew time.Duration) *compensate.Artifacts {
					arts, err := compensate.New(ctx, compensate.Config{
						Guard: lb.jobs.Guard, DB: lb.env.Pool, Table: table, RecheckAfter: recheck,
						Now:          skewedClock(skew),
						Compensators: map[string]compensate.Func{"object": lb.store.remove},
					})
					require.NoError(t, err)
					return arts
				}
				// later moves the database's clock on for this table's
				// schedules: what is due at T+d is due now.
				later := func(d time.Duration) {
					t.Helper()
					_, err := lb.env.Pool.Exec(ctx, `UPDATE `+table+
						` SET recheck_at = recheck_at - $1::int8 * interval '1 microsecond'`, d.Microseconds())
					require.NoError(t, err)
				}
				sweep := func(a *compensate.Artifacts) compensate.Report {
					t.Helper()
					rep, err := a.Compensate(ctx)
					require.NoError(t, err)
					return rep
				}
				a, b := process(first), process(sweeper)

				exec := jobguard.Execution{JobID: lb.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
				ref := fmt.Sprintf("videos/%s/g1.mp4", exec.JobID)
				require.NoError(t, a.Record(ctx, lb.env.Pool, exec, "object", ref))
				require.NoError(t, lb.jobs.Guard.Fail(ctx, lb.env.Pool, exec, jobguard.ReclaimedReasonDefault))
				require.Equal(t, compensate.Report{Rejected: 1, Compensated: 1}, sweep(a))

				require.Zero(t, sweep(b).Rechecked, "rechecked at once: an upload still in flight would stay for good")
				lb.store.upload(t, ref, "late") // the upload that was in flight lands
				later(recheck - time.Minute)
				require.Zero(t, sweep(b).Rechecked, "rechecked a minute early by the database's clock")
				require.Equal(t, "late", lb.store.read(t, ref))

				later(time.Minute)
				require.Equal(t, 1, sweep(b).Rechecked, "not rechecked RecheckAfter after the first compensation")
				require.Empty(t, lb.store.read(t, ref), "the late upload of the lost execution stayed")
				require.Zero(t, sweep(a).Rechecked+sweep(b).Rechecked, "the second compensation is the last")
			})
		}
	}
}

// TestRecheck_AnyRecheckAfterIsScheduledOnTheDatabasesClock schedules the
// recheck with the extremes of RecheckAfter, from a nanosecond to the
// largest time.Duration, and finds it that long after the compensation by
// the database's clock (to the microsecond; a nanosecond is at once),
// whatever the process's clock.
func TestRecheck_AnyRecheckAfterIsScheduledOnTheDatabasesClock(t *testing.T) {
	t.Parallel()
	lb := setupLate(t)
	ctx := context.Background()
	for i, after := range []time.Duration{time.Nanosecond, time.Microsecond, time.Second, 292 * 365 * 24 * time.Hour, math.MaxInt64} {
		table := fmt.Sprintf("artifacts_%d", i)
		t.Run(after.String(), func(t *testing.T) {
			t.Parallel()
			_, err := lb.env.Pool.Exec(ctx, `CREATE TABLE `+table+` (LIKE job_artifacts INCLUDING ALL)`)
			require.NoError(t, err)
			arts, err := compensate.New(ctx, compensate.Config{
				Guard: lb.jobs.Guard, DB: lb.env.Pool, Table: table, RecheckAfter: after,
				Now:          skewedClock(-24 * time.Hour),
				Compensators: map[string]compensate.Func{"object": lb.store.remove},
			})
			require.NoError(t, err)
			exec := jobguard.Execution{JobID: lb.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
			require.NoError(t, arts.Record(ctx, lb.env.Pool, exec, "object", "videos/"+exec.JobID))
			require.NoError(t, lb.jobs.Guard.Fail(ctx, lb.env.Pool, exec, jobguard.ReclaimedReasonDefault))

			dbNow := func() (at time.Time) {
				require.NoError(t, lb.env.Pool.QueryRow(ctx, `SELECT statement_timestamp()`).Scan(&at))
				return at
			}
			before := dbNow()
			// CompensateExecution runs the first compensation alone, without
			// the recheck pass a sweep makes after it.
			rep, err := arts.CompensateExecution(ctx, exec)
			require.NoError(t, err)
			require.Equal(t, compensate.Report{Rejected: 1, Compensated: 1}, rep)
			us := after.Truncate(time.Microsecond)
			end := dbNow()
			var due time.Time
			require.NoError(t, lb.env.Pool.QueryRow(ctx, `SELECT recheck_at FROM `+table).Scan(&due))
			require.False(t, due.Before(before.Add(us)), "recheck at %v, compensated after %v", due, before)
			require.False(t, due.After(end.Add(us)), "recheck at %v, compensated before %v", due, end)
		})
	}
}
