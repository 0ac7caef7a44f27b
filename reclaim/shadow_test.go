package reclaim_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/reclaim"
)

// A shadow sweep decides exactly what a live sweep then does, and writes
// nothing on the way: no job row, no parent, no marker, no notice; a row
// another transaction holds does not stop it.
func TestShadow_DecidesLikeALiveSweepAndWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	courses(t, env, "course-a", "course-b", "course-c", "course-d")
	stuck := jobs.Insert(t, fixture.Job{ParentID: "course-a", UpdatedAgo: 2 * time.Hour})
	held := jobs.Insert(t, fixture.Job{ParentID: "course-b", UpdatedAgo: 2 * time.Hour})
	alive := jobs.Insert(t, fixture.Job{ParentID: "course-c", UpdatedAgo: 2 * time.Hour})
	setUpdatedAgo(t, jobs, alive, time.Minute)
	fresh := jobs.Insert(t, fixture.Job{ParentID: "course-d", UpdatedAgo: time.Minute})
	written := env.Audit("jobs", "courses")

	// A worker transaction holds one stuck row, idle.
	tx, err := env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, held)
	require.NoError(t, err)

	notices := &recordingPublisher{}
	cfg := reclaim.Config{OnReclaim: map[string]reclaim.ParentRule{"chapter": failCourse(t)}, Notices: notices,
		SweepTimeout: 10 * time.Second}
	shadowCfg := cfg
	shadowCfg.Shadow = true
	shadow, logs := newReclaimer(t, jobs, shadowCfg)
	rep, err := shadow.Sweep(ctx)
	require.NoError(t, err, "a held row does not stop a shadow sweep")
	require.Equal(t, 2, rep.WouldReclaim)
	require.ElementsMatch(t, []string{stuck, held}, rep.WouldReclaimIDs)
	require.Equal(t, 1, rep.Progressing)
	require.Zero(t, rep.Reclaimed)
	require.Empty(t, rep.ReclaimedIDs)

	require.Zero(t, written(), "no row of the jobs or the courses table was written")
	for _, id := range []string{stuck, held, alive, fresh} {
		require.Equal(t, "PROCESSING", jobs.Read(t, id).Status)
		require.False(t, hasMarker(t, jobs, id), "no marker for %s", id)
	}
	status, _, _ := courseStatus(t, env, "course-a")
	require.Equal(t, "GENERATING", status)
	require.Empty(t, notices.got, "no notice")
	// The runtime is measured when the row is read, seconds after the insert
	// on a loaded machine.
	require.Regexp(t, `msg="reclaim: shadow: would reclaim" job_id=`+stuck+` job_type=chapter generation=0 runtime=2h0m\d+s limit=30m0s stalled_for=2h0m\d+s`, logs.String())
	require.Contains(t, logs.String(), `msg="reclaim: sweep" shadow=true would_reclaim=2 would_rescue=0 scanned=3 reclaimed=0 rescued=0`)

	// The live sweep does what the shadow said, once the row is released.
	require.NoError(t, tx.Rollback(ctx))
	live, _ := newReclaimer(t, jobs, cfg)
	rep2, err := live.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, rep.WouldReclaim, rep2.Reclaimed)
	require.ElementsMatch(t, rep.WouldReclaimIDs, rep2.ReclaimedIDs)
	require.Zero(t, rep2.WouldReclaim, "a live sweep counts what it did, not what it would do")
	require.Positive(t, written(), "the audit sees the live sweep's writes")
	require.Len(t, notices.got, 2)
}

// A shadow reclaimer's Run leads among shadow instances on a lock of its
// own: beside a live reclaimer of the same table it neither blocks it nor
// waits for it.
func TestShadow_RunLeadsBesideALiveReclaimer(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	key := rand.Int64N(1<<62) + 1

	startRunWith(t, jobs, "shadow", key, reclaim.Config{Interval: 40 * time.Millisecond, SweepTimeout: testenv.Patience, Shadow: true})
	require.Eventually(t, func() bool { return leaderPID(t, env, key^(-1<<63)) != 0 }, testenv.Patience, 10*time.Millisecond,
		"the shadow instance leads on its own key")
	startRun(t, jobs, key, "live")
	require.Equal(t, "live", reclaimedBy(t, jobs), "the live instance leads and reclaims beside the shadow one")
	require.NotEqual(t, leaderPID(t, env, key), leaderPID(t, env, key^(-1<<63)))
}

// Plan says, job by job, what a sweep would do and why, in figures and in
// words, and writes nothing, on a reclaimer that is not in shadow mode.
func TestPlan_SaysWhatASweepWouldDoAndWhy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	stuck := jobs.Insert(t, fixture.Job{Generation: 3, UpdatedAgo: 2 * time.Hour})
	alive := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
	setUpdatedAgo(t, jobs, alive, 2*time.Minute)
	untyped := jobs.Insert(t, fixture.Job{Type: "video", UpdatedAgo: 2 * time.Hour})
	written := env.Audit("jobs")

	r, logs := newReclaimer(t, jobs, reclaim.Config{})
	plan, err := r.Plan(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, plan.Report.WouldReclaim)
	require.Equal(t, []string{stuck}, plan.Report.WouldReclaimIDs)
	require.Zero(t, plan.Report.Reclaimed)
	require.Zero(t, written(), "a plan writes nothing")
	require.False(t, hasMarker(t, jobs, stuck))
	require.NotContains(t, logs.String(), "reclaim: sweep", "a plan is not a sweep")

	byID := map[string]reclaim.PlannedJob{}
	for _, j := range plan.Jobs {
		byID[j.ID] = j
	}
	require.Len(t, byID, 3)
	near := func(want, got time.Duration) {
		t.Helper()
		require.InDelta(t, want.Seconds(), got.Seconds(), 30, "want about %v, got %v", want, got)
	}

	j := byID[stuck]
	require.Equal(t, reclaim.DecisionReclaim, j.Decision)
	require.Equal(t, "chapter", j.Type)
	require.EqualValues(t, 3, j.Generation)
	require.Equal(t, 30*time.Minute, j.Limit)
	near(2*time.Hour, j.Runtime)
	near(2*time.Hour, j.StalledFor)
	require.Regexp(t, `^runtime 2h0m\d+s > limit 30m0s and no progress for 2h0m\d+s \(threshold 15m0s\): reclaim$`, j.String())

	j = byID[alive]
	require.Equal(t, reclaim.DecisionProgressing, j.Decision)
	near(2*time.Hour, j.Runtime)
	near(2*time.Minute, j.StalledFor)
	require.Regexp(t, `^runtime 2h0m\d+s > limit 30m0s, but progress 2m\d+s ago \(threshold 15m0s\): kept as progressing$`, j.String())

	j = byID[untyped]
	require.Equal(t, reclaim.DecisionUnknownType, j.Decision)
	require.Zero(t, j.Limit)
	require.Equal(t, `type "video" has no limit: never reclaimed`, j.String())

	// The plan holds exactly what a sweep then does.
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, plan.Report.WouldReclaimIDs, rep.ReclaimedIDs)
	require.Equal(t, plan.Report.Progressing, rep.Progressing)
	require.Equal(t, plan.Report.UnknownType, rep.UnknownType)
}

// Every decision reads as words, and an unknown one as its name.
func TestPlannedJob_StringForEveryDecision(t *testing.T) {
	t.Parallel()
	for d := reclaim.DecisionSourceError; d <= reclaim.DecisionReclaim; d++ {
		s := reclaim.PlannedJob{ID: "j", Type: "chapter", Decision: d, Limit: time.Minute}.String()
		require.NotEmpty(t, s)
		require.NotEqual(t, d.String(), s, "decision %v has words", d)
	}
	require.Equal(t, "undecided", reclaim.PlannedJob{}.String())
	require.Contains(t, reclaim.PlannedJob{Decision: reclaim.DecisionStale}.String(), "no longer runs")
}
