package reclaim_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/metrics"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/metricstest"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/reclaim"
)

// stallAll inserts n running chapter jobs whose attempt started two hours
// ago and whose heartbeats stopped together an hour ago, as when their
// heartbeats could not be written: updated_at aged by SQL, job i a second
// older than job i-1. It returns their ids, the oldest first.
func stallAll(t *testing.T, env *testenv.Env, n int) []string {
	t.Helper()
	rows, err := env.Pool.Query(context.Background(), `INSERT INTO jobs (type, status, generation, started_at, updated_at)
		SELECT 'chapter', 'PROCESSING', 1, now() - interval '2 hours', now() - interval '1 hour' - i * interval '1 second'
		FROM generate_series(1, $1) AS i ORDER BY i DESC RETURNING id::text`, n)
	require.NoError(t, err)
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, n)
	return ids
}

func countStatus(t *testing.T, env *testenv.Env, status string) int {
	t.Helper()
	var n int
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM jobs WHERE status = $1`, status).Scan(&n))
	return n
}

// A hundred jobs that stall at once are a suspect sweep, not a hundred
// stuck jobs: with a cap of 10, the sweep reclaims the ten stalled
// longest, counts the other ninety as braked, says why in its report, logs
// its line at error and records the decision braked. A second sweep with
// the brake released reclaims the rest.
func TestSweep_MassStallIsBrakedAtTheCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	ids := stallAll(t, env, 100)
	m := metricstest.New(t)
	r, logs := newReclaimer(t, jobs, reclaim.Config{MeterProvider: m.Provider,
		Brake: reclaim.Brake{MaxJobs: 10, MaxJobsPerType: 10}})

	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 10, rep.Reclaimed)
	require.Equal(t, 90, rep.Braked)
	require.ElementsMatch(t, ids[:10], rep.ReclaimedIDs, "the ten stalled longest")
	require.Contains(t, rep.BrakeReason, `100 of 100 running jobs of type "chapter", more than the cap of 10`)
	require.Contains(t, logs.String(), `level=ERROR msg="reclaim: sweep" scanned=100 reclaimed=10 rescued=0 braked=90 `)
	require.Contains(t, logs.String(), `brake="100 of 100 running jobs of type \"chapter\"`)
	require.Equal(t, int64(90), m.Count(t, metrics.ReclaimDecisions, metrics.KeyDecision.String("braked")))
	require.Equal(t, 10, countStatus(t, env, "FAILED"))
	require.Equal(t, 90, countStatus(t, env, "PROCESSING"))

	r.ReleaseBrake()
	rep, err = r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 90, rep.Reclaimed)
	require.Zero(t, rep.Braked)
	require.Empty(t, rep.BrakeReason)
	require.Equal(t, 100, countStatus(t, env, "FAILED"))
	require.Equal(t, int64(90), m.Count(t, metrics.ReclaimDecisions, metrics.KeyDecision.String("braked")))
}

// The default brake leaves a healthy small deployment alone: every one of
// its three running jobs stalled is three reclaims, below the share floor.
func TestSweep_DefaultBrakeNeverHoldsASmallDeployment(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	stallAll(t, env, 3)
	r, logs := newReclaimer(t, jobs, reclaim.Config{})

	rep, err := r.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, 3, rep.Reclaimed)
	require.Zero(t, rep.Braked)
	require.NotContains(t, logs.String(), "braked=")
}

// The default share cap over the table source's count of the running
// jobs: of 30 stalled among 100 running, all go (30 is under half); of 60
// stalled among 100, half the running go, the 50 stalled longest.
func TestSweep_ShareCapCountsTheRunningJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	env.Exec(`INSERT INTO jobs (type, status, generation, started_at, updated_at)
		SELECT 'chapter', 'PROCESSING', 1, now() - interval '2 hours', now() FROM generate_series(1, 40)`)
	stalled := stallAll(t, env, 60)
	r, _ := newReclaimer(t, jobs, reclaim.Config{})

	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 50, rep.Reclaimed)
	require.Equal(t, 10, rep.Braked)
	require.ElementsMatch(t, stalled[:50], rep.ReclaimedIDs)
	require.Contains(t, rep.BrakeReason, `60 of 100 running jobs of type "chapter", more than the cap of 50`)

	// Ten stalled of the fifty still running: no brake.
	rep, err = r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 10, rep.Reclaimed)
	require.Zero(t, rep.Braked)
}

// A sweep whose database clock moved an hour apart from the reclaimer's
// monotonic clock since the last sweep cannot trust a runtime or a stall:
// it reclaims nothing, says why, and the next sweep, whose clocks agree
// with this one's, reclaims, whatever the reclaimer's wall clock did.
func TestSweep_ClockJumpBrakesTheSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	var offset, wallStep atomic.Int64
	r, logs := newReclaimer(t, jobs, reclaim.Config{Now: func() time.Time { return time.Now().Add(time.Duration(wallStep.Load())) }})
	reclaim.SetElapsedClock(r, func() time.Time { return time.Now().Add(time.Duration(offset.Load())) })

	first := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{first}, rep.ReclaimedIDs, "the first sweep has no reading to compare with")

	// Between two sweeps, the database's clock moves an hour more than
	// the reclaimer's: seen from the reclaimer, it jumped.
	offset.Store(int64(-time.Hour))
	second := jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: 2 * time.Hour})
	rep, err = r.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Reclaimed)
	require.Equal(t, 1, rep.Braked)
	// About an hour: each clock is read a moment after the other.
	require.Regexp(t, `the database.s clock moved (59m5\d\.\d+s|1h0m[\d.]*s) apart`, rep.BrakeReason)
	require.Contains(t, logs.String(), `level=ERROR msg="reclaim: sweep"`)
	require.Equal(t, "PROCESSING", jobs.Read(t, second).Status)

	// A step of the reclaimer's own wall clock (Config.Now) is no jump of
	// the evidence: the next sweep, whose clocks agree again, reclaims.
	wallStep.Store(int64(365 * 24 * time.Hour))
	rep, err = r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{second}, rep.ReclaimedIDs)
	require.Zero(t, rep.Braked)
}

// A plan shows what the brake would hold back, and leaves its release for
// the sweep.
func TestPlan_ShowsTheBrake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	stallAll(t, env, 30)
	r, _ := newReclaimer(t, jobs, reclaim.Config{Brake: reclaim.Brake{MaxJobs: 10}})

	plan, err := r.Plan(ctx)
	require.NoError(t, err)
	require.Equal(t, 10, plan.Report.WouldReclaim)
	require.Equal(t, 20, plan.Report.Braked)
	braked := 0
	for _, j := range plan.Jobs {
		if j.Braked {
			braked++
			require.Contains(t, j.String(), "the brake holds it back")
		}
	}
	require.Equal(t, 20, braked)

	r.ReleaseBrake()
	plan, err = r.Plan(ctx)
	require.NoError(t, err)
	require.Equal(t, 30, plan.Report.WouldReclaim)
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 30, rep.Reclaimed, "the plan left the release for the sweep")
}

// A paused type is never reclaimed and is counted as paused; a type in
// shadow is counted as would-reclaim and not written; resuming restores
// the reclaim. The modes live in the limits table, beside the limits.
func TestSweep_PausedAndShadowTypes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	env.Exec(reclaim.Migration)
	env.Exec(reclaim.Migration) // safe to run twice
	tl, err := reclaim.NewTableLimits(reclaim.TableLimitsConfig{DB: env.Pool})
	require.NoError(t, err)
	for _, typ := range []string{"chapter", "video", "export"} {
		require.NoError(t, tl.Set(ctx, typ, 30*time.Minute))
	}
	require.NoError(t, tl.SetMode(ctx, "chapter", reclaim.ModeOff))
	require.NoError(t, tl.SetMode(ctx, "video", reclaim.ModeShadow))
	require.ErrorIs(t, tl.SetMode(ctx, "mystery", reclaim.ModeOff), reclaim.ErrNoLimit)
	require.Error(t, tl.SetMode(ctx, "chapter", reclaim.Mode("sometimes")))
	chapter := jobs.Insert(t, fixture.Job{Type: "chapter", Generation: 1, UpdatedAgo: 2 * time.Hour})
	video := jobs.Insert(t, fixture.Job{Type: "video", Generation: 1, UpdatedAgo: 2 * time.Hour})
	export := jobs.Insert(t, fixture.Job{Type: "export", Generation: 1, UpdatedAgo: 2 * time.Hour})
	m := metricstest.New(t)
	r, logs := newReclaimer(t, jobs, reclaim.Config{Limits: tl, MeterProvider: m.Provider})

	_, modes, err := tl.LimitsAndModes(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]reclaim.Mode{"chapter": reclaim.ModeOff, "video": reclaim.ModeShadow}, modes)

	plan, err := r.Plan(ctx)
	require.NoError(t, err)
	why := map[string]string{}
	for _, j := range plan.Jobs {
		why[j.ID] = j.String()
	}
	require.Contains(t, why[chapter], `type "chapter" is paused: left alone`)
	require.Contains(t, why[video], `type "video" is in shadow`)
	require.Contains(t, why[export], `: reclaim`)

	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{export}, rep.ReclaimedIDs)
	require.Equal(t, 1, rep.Paused)
	require.Equal(t, []string{video}, rep.WouldReclaimIDs)
	require.Equal(t, "PROCESSING", jobs.Read(t, chapter).Status)
	require.Equal(t, "PROCESSING", jobs.Read(t, video).Status)
	require.Contains(t, logs.String(), `msg="reclaim: sweep" scanned=3 would_reclaim=1 reclaimed=1 rescued=0 paused=1 within_limit=0`)
	require.Equal(t, map[string]int64{"reclaimed": 1, "paused": 1, "would_reclaim": 1},
		nonZero(m.Counts(t, metrics.ReclaimDecisions, metrics.KeyDecision)))

	require.NoError(t, tl.SetMode(ctx, "chapter", reclaim.ModeReclaim))
	require.NoError(t, tl.SetMode(ctx, "video", reclaim.ModeReclaim))
	rep, err = r.Sweep(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{chapter, video}, rep.ReclaimedIDs)
	require.Zero(t, rep.Paused)
	require.Zero(t, rep.WouldReclaim)
}

// A limits table that predates the mode column reads as before: every
// type reclaims.
func TestTableLimits_WithoutTheModeColumnEveryTypeReclaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	env.Exec(`CREATE TABLE job_type_limits (job_type text PRIMARY KEY, max_runtime interval NOT NULL)`)
	env.Exec(`INSERT INTO job_type_limits VALUES ('chapter', '30 minutes')`)
	tl, err := reclaim.NewTableLimits(reclaim.TableLimitsConfig{DB: env.Pool})
	require.NoError(t, err)
	limits, modes, err := tl.LimitsAndModes(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]time.Duration{"chapter": 30 * time.Minute}, limits)
	require.Empty(t, modes)
	require.ErrorContains(t, tl.SetMode(ctx, "chapter", reclaim.ModeOff), "apply reclaim's migration files")
}

// The table source counts the running jobs of each type from the active
// index, never the finished rows, below the cost at which the server
// compiles the statement.
func TestTableSource_CountRunningReadsTheActiveIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	env.Exec(`INSERT INTO jobs (type, status, started_at, updated_at)
		SELECT (ARRAY['chapter', 'video', 'export'])[1 + i % 3], 'COMPLETED', now() - interval '1 day', now()
		FROM generate_series(1, 50000) AS i`)
	env.Exec(`INSERT INTO jobs (type, status, started_at, updated_at)
		SELECT (ARRAY['chapter', 'video'])[1 + i % 2], 'PROCESSING', now() - interval '2 hours', now()
		FROM generate_series(1, 6000) AS i`)
	// Queued rows (retried: no start) and running rows without a start
	// are not running attempts.
	env.Exec(`INSERT INTO jobs (type, status, updated_at)
		SELECT (ARRAY['chapter', 'video'])[1 + i % 2], (ARRAY['PROCESSING', 'QUEUED'])[1 + i % 2], now()
		FROM generate_series(1, 1000) AS i`)
	env.Exec(`ANALYZE jobs`)
	src, err := reclaim.NewTableSource(jobs.Guard, env.Pool)
	require.NoError(t, err)

	start := time.Now()
	running, err := src.CountRunning(ctx)
	took := time.Since(start)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"chapter": 3000, "video": 3000}, running, "the active rows with a start")
	t.Logf("CountRunning over 6000 running and 50000 finished jobs: %v", took)

	var plan []string
	rows, err := env.Pool.Query(ctx, `EXPLAIN `+reclaim.RunningSQL(src))
	require.NoError(t, err)
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan = append(plan, line)
	}
	require.NoError(t, rows.Err())
	text := ""
	for _, l := range plan {
		text += l + "\n"
	}
	require.Contains(t, text, "jobs_active_idx", text)
	require.NotContains(t, text, "Seq Scan", text)
	var cost float64
	_, err = fmt.Sscanf(text[strings.Index(text, "..")+2:], "%f", &cost)
	require.NoError(t, err, text)
	require.Less(t, cost, 100000.0, "below jit_above_cost's default:\n"+text)
}

func nonZero(m map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}
