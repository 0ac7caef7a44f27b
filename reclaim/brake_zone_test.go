package reclaim_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/reclaim"
)

// The brake's choice, the jobs stalled longest, does not depend on the
// session's time zone: in a zone east and one west of UTC (with daylight
// saving time), over every table shape (a timestamp column without time
// zone among them, whose values are UTC wall time, and the shapes that
// record their start), a sweep capped at one
// reclaims the job whose updated_at is oldest, the next sweep the next
// one, and a job that progressed a minute ago is neither reclaimed nor
// counted as braked. Read in the session's zone instead of UTC, a wall
// clock column would make the fresh job look stalled for hours (Seoul) or
// not at all the stalled ones (Los Angeles), and the counts would differ.
func TestBrake_StalledLongestFirstInAnySessionTimeZone(t *testing.T) {
	t.Parallel()
	for _, zone := range fixture.TimeZones {
		if zone == "UTC" {
			continue
		}
		for _, v := range append([]fixture.Variant{fixture.Int4Nullable}, fixture.Variants...) {
			t.Run(strings.ReplaceAll(zone, "/", "-")+"/"+v.Name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				env := testenv.New(t, testenv.Config{TimeZone: zone})
				jobs := fixture.Create(t, env, v)
				if jobs.Table.StartedAtColumn == "" {
					t.Skip("no start column: the table is not its own queue")
				}
				// Stalled 2, 4 and 3 hours, and one that progressed a minute
				// ago; all started 6 hours ago or more.
				ids := map[time.Duration]string{}
				for _, ago := range []time.Duration{2 * time.Hour, 4 * time.Hour, 3 * time.Hour, time.Minute} {
					id := jobs.Insert(t, fixture.Job{UpdatedAgo: 6 * time.Hour})
					jobs.Backdate(t, id, jobs.Table.UpdatedAtColumn, ago)
					ids[ago] = id
				}
				r, logs := newReclaimer(t, jobs, reclaim.Config{
					Limits: reclaim.StaticLimits{"chapter": 30 * time.Minute, "": 30 * time.Minute},
					Brake:  reclaim.Brake{MaxJobs: 1},
				})
				for _, want := range []struct {
					ago    time.Duration
					braked int
				}{{4 * time.Hour, 2}, {3 * time.Hour, 1}, {2 * time.Hour, 0}} {
					rep, err := r.Sweep(ctx)
					require.NoError(t, err, logs.String())
					require.Equal(t, []string{ids[want.ago]}, rep.ReclaimedIDs, "the job stalled %v, the longest left (%s)", want.ago, logs.String())
					require.Equal(t, want.braked, rep.Braked, "the stalled jobs left (report %+v)", rep)
				}
				require.Equal(t, jobs.Table.Statuses.Processing, jobs.Read(t, ids[time.Minute]).Status)
			})
		}
	}
}
