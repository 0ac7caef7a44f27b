package reclaim_test

import (
	"context"
	"errors"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/metrics"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/metricstest"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/reclaim"
)

func TestMetrics_EveryReportCountIsADecision(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	ctx := context.Background()
	st := jobs.Table.Statuses
	now := time.Now()
	old := now.Add(-2 * time.Hour)
	// Every row's attempt started two hours ago; updatedAgo is its progress.
	insert := func(updatedAgo time.Duration, status string) string {
		id := jobs.Insert(t, fixture.Job{Status: status, Generation: 1, UpdatedAgo: 2 * time.Hour})
		setUpdatedAgo(t, jobs, id, updatedAgo)
		return id
	}
	stalled := insert(time.Hour, "")
	alive := insert(time.Minute, "")
	young := insert(time.Hour, "")
	noStart := insert(time.Hour, "")
	env.Exec(`UPDATE jobs SET started_at = NULL WHERE id = $1`, noStart)
	unknown := insert(time.Hour, "")
	unread := insert(time.Hour, "")
	finished := insert(time.Hour, st.Completed)
	restarted := insert(time.Hour, "")
	env.Exec(`UPDATE jobs SET started_at = now() - interval '5 minutes' WHERE id = $1`, restarted)
	// raced is read while stalled, then moves before the write: the source
	// hands the sweep a row that is no longer the row.
	raced := insert(time.Hour, "")
	rows, err := jobset.New(jobs.Guard).Snapshot(ctx, env.Pool, []string{raced})
	require.NoError(t, err)
	row := rows[raced]
	setUpdatedAgo(t, jobs, raced, 50*time.Minute)

	src := listSource{
		{ID: stalled, Type: "chapter", StartedAt: old},
		{ID: alive, Type: "chapter", StartedAt: old},
		{ID: young, Type: "chapter", StartedAt: now.Add(-10 * time.Minute)},
		{ID: noStart, Type: "chapter"},
		{ID: unknown, Type: "mystery", StartedAt: old},
		{ID: unread, Type: "chapter", Err: errors.New("hash unreadable")},
		{ID: finished, Type: "chapter", StartedAt: old},
		{ID: restarted, Type: "chapter", StartedAt: old},
		{ID: raced, Type: "chapter", StartedAt: old, Row: &row},
	}
	r := metricstest.New(t)
	logs := &testenv.Logs{}
	debug := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rec, _ := newReclaimer(t, jobs, reclaim.Config{Source: src, MeterProvider: r.Provider, Logger: debug})

	rep, err := rec.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, reclaim.Report{
		Scanned: 9, NoStartTime: 1, SourceErrors: 1, UnknownType: 1, WithinLimit: 1, Stale: 1,
		NotActive: 1, Progressing: 1, Reclaimed: 1, LostRace: 1, ReclaimedIDs: []string{stalled},
	}, rep)
	// The log lines an operator follows carry the stable keys.
	require.Contains(t, logs.String(), `msg="reclaim: job reclaimed" job_id=`+stalled+` job_type=chapter generation=1 parent_id=""`)
	require.Contains(t, logs.String(), `msg="reclaim: job over its limit left alone" job_id=`+restarted+` job_type=chapter decision=stale`)
	require.Contains(t, logs.String(), `level=WARN msg="reclaim: sweep" scanned=9 reclaimed=1 rescued=0 within_limit=1 progressing=1 stale=1 not_active=1 `+
		`no_start_time=1 unknown_type=1 source_errors=1 lost_race=1 locked=0 rule_errors=0 marker_errors=0 notice_errors=0 took=`)

	// A second sweep finds the reclaimed job no longer active, and the
	// stale row stale again.
	_, err = rec.Sweep(ctx)
	require.NoError(t, err)

	require.Equal(t, map[string]int64{
		"no_start_time": 2, "source_error": 2, "unknown_type": 2, "within_limit": 2, "stale": 2,
		"not_active": 3, "progressing": 2, "reclaimed": 1, "lost_race": 2,
	}, r.Counts(t, metrics.ReclaimDecisions, metrics.KeyDecision))
	require.Empty(t, r.Counts(t, metrics.ReclaimMarkerErrors, metrics.KeyResult))

	n, sum := r.Histogram(t, metrics.ReclaimSweepDuration, metrics.KeyResult.String("ok"))
	require.Equal(t, uint64(2), n)
	require.Positive(t, sum)
	require.Equal(t, "s", r.Unit(t, metrics.ReclaimSweepDuration))
}

func TestMetrics_FailedSweepsAndMarkerErrors(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	ctx := context.Background()
	r := metricstest.New(t)

	failing, _ := newReclaimer(t, jobs, reclaim.Config{Source: failingSource{}, MeterProvider: r.Provider})
	_, err := failing.Sweep(ctx)
	require.Error(t, err)

	jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
	jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = down.Close() })
	noMarkers, _ := newReclaimer(t, jobs, reclaim.Config{Redis: down, Notices: failingPublisher{}, MeterProvider: r.Provider})
	rep, err := noMarkers.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, rep.MarkerErrors)
	require.Equal(t, 2, rep.NoticeErrors)

	require.Equal(t, int64(2), r.Count(t, metrics.ReclaimMarkerErrors))
	require.Equal(t, int64(2), r.Count(t, metrics.ReclaimNoticeErrors))
	require.Equal(t, map[string]int64{"reclaimed": 2}, r.Counts(t, metrics.ReclaimDecisions, metrics.KeyDecision))
	n, _ := r.Histogram(t, metrics.ReclaimSweepDuration, metrics.KeyResult.String("error"))
	require.Equal(t, uint64(1), n)
	n, _ = r.Histogram(t, metrics.ReclaimSweepDuration, metrics.KeyResult.String("ok"))
	require.Equal(t, uint64(1), n)
}
