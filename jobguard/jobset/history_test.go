package jobset_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
)

// History reads the runtimes of the finished jobs, per type, in every table
// shape and session time zone: the percentiles interpolate, only jobs in the
// window count, PerType keeps the latest, and reclaims are told from other
// failures by the guard's reclaimed reason.
func TestHistory_SummarizesFinishedRuntimesPerType(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		ctx := context.Background()
		db := jobs.Env.Pool
		tb, st := jobs.Table, jobs.Table.Statuses
		typ := ""
		if tb.TypeColumn != "" {
			typ = "chapter"
		}
		q := jobset.HistoryQuery{Limits: map[string]time.Duration{typ: 15 * time.Minute}, Window: 7 * 24 * time.Hour, PerType: 1000}
		if tb.StartedAtColumn == "" {
			_, err := jobset.New(jobs.Guard).History(ctx, db, q)
			require.ErrorIs(t, err, jobset.ErrNoStartedAt)
			return
		}
		// finished inserts a job that ran run and finished ago.
		finished := func(status, reason string, run, ago time.Duration) {
			id := jobs.Insert(t, fixture.Job{Status: status, Reason: reason})
			jobs.Backdate(t, id, tb.UpdatedAtColumn, ago)
			jobs.Backdate(t, id, tb.StartedAtColumn, ago+run)
		}
		// Twenty completions of 1 to 20 minutes, the shortest finished last.
		for i := 1; i <= 20; i++ {
			finished(st.Completed, "", time.Duration(i)*time.Minute, time.Hour+time.Duration(i)*time.Second)
		}
		finished(st.Failed, jobguard.ReclaimedReasonDefault, 3*time.Hour, 2*time.Hour)
		finished(st.Failed, jobguard.ReclaimedReasonDefault+" by r1", 3*time.Hour, 2*time.Hour)
		finished(st.Failed, "encoder crashed", time.Minute, 2*time.Hour)
		finished(st.Completed, "", 100*time.Minute, 10*24*time.Hour) // outside the window
		jobs.Insert(t, fixture.Job{UpdatedAgo: 5 * time.Hour})       // running: not finished
		near := func(want, got time.Duration, what string) {
			t.Helper()
			require.InDelta(t, want.Seconds(), got.Seconds(), 1, "%s: want %v, got %v", what, want, got)
		}

		q.Percentile = 0.5
		if typ != "" {
			q.Limits["video"] = 0 // no jobs
		}
		hs, err := jobset.New(jobs.Guard).History(ctx, db, q)
		require.NoError(t, err)
		h := hs[0]
		require.Equal(t, typ, h.Type)
		require.Equal(t, 20, h.Completed)
		near(630*time.Second, h.P50, "p50")          // 10.5 min
		near(1086*time.Second, h.P90, "p90")         // 1 + 0.9 × 19 = 18.1 min
		near(1188600*time.Millisecond, h.P99, "p99") // 1 + 0.99 × 19 = 19.81 min
		near(20*time.Minute, h.Max, "max")
		near(630*time.Second, h.AtPercentile, "the asked percentile")
		require.Equal(t, 5, h.OverLimit, "16 to 20 minutes ran past 15")
		require.Equal(t, 2, h.Reclaimed)
		require.Equal(t, 1, h.Failed)
		if typ != "" {
			require.Len(t, hs, 2)
			require.Equal(t, jobset.TypeHistory{Type: "video"}, hs[1], "a type without finished jobs has none")
		}

		// The window's bound is on the database's clock in the column's
		// convention, whatever the session's zone.
		q.Window = 90 * time.Minute
		hs, err = jobset.New(jobs.Guard).History(ctx, db, q)
		require.NoError(t, err)
		require.Equal(t, 20, hs[0].Completed, "finished an hour ago: in")
		require.Zero(t, hs[0].Reclaimed+hs[0].Failed, "finished two hours ago: out")

		q.PerType = 5
		hs, err = jobset.New(jobs.Guard).History(ctx, db, q)
		require.NoError(t, err)
		require.Equal(t, 5, hs[0].Completed, "the latest five")
		near(5*time.Minute, hs[0].Max, "the latest five are the shortest")
		require.Zero(t, hs[0].Reclaimed)
	})
}

func TestHistory_RefusesABadQuery(t *testing.T) {
	t.Parallel()
	jobs := fixture.Create(t, testenv.New(t), fixture.Default)
	ctx := context.Background()
	ok := jobset.HistoryQuery{Limits: map[string]time.Duration{"chapter": 0}, Window: time.Hour, PerType: 1}
	for field, mutate := range map[string]func(*jobset.HistoryQuery){
		"Limits":     func(q *jobset.HistoryQuery) { q.Limits = nil },
		"Window":     func(q *jobset.HistoryQuery) { q.Window = 0 },
		"PerType":    func(q *jobset.HistoryQuery) { q.PerType = -1 },
		"Percentile": func(q *jobset.HistoryQuery) { q.Percentile = 1.5 },
	} {
		q := ok
		mutate(&q)
		_, err := jobset.New(jobs.Guard).History(ctx, jobs.Env.Pool, q)
		require.ErrorContains(t, err, field)
	}
	hs, err := jobset.New(jobs.Guard).History(ctx, jobs.Env.Pool, ok)
	require.NoError(t, err)
	require.Equal(t, []jobset.TypeHistory{{Type: "chapter"}}, hs)
}
