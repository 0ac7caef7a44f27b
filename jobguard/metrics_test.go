package jobguard_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"

	"github.com/jobguard/jobguard/internal/metrics"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/metricstest"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
)

// instrumented returns a guard over jobs' table whose metrics r reads.
func instrumented(t *testing.T, jobs *fixture.Jobs, r *metricstest.Reader) *jobguard.Guard {
	t.Helper()
	g, err := jobguard.NewWithConfig(context.Background(), jobs.Env.Pool, jobs.Table,
		jobguard.GuardConfig{MeterProvider: r.Provider})
	require.NoError(t, err)
	return g
}

func TestMetrics_CompletionsCountedByOutcomeAndReason(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	ctx := context.Background()
	db := env.Pool
	r := metricstest.New(t)
	g := instrumented(t, jobs, r)
	sg, err := jobguard.NewStartGuard(g, env.Redis, jobguard.StartGuardConfig{})
	require.NoError(t, err)

	// A: completed once, then a late second completion is refused.
	a, err := sg.Start(ctx, db, jobs.Insert(t, fixture.Job{Status: "QUEUED"}))
	require.NoError(t, err)
	require.NoError(t, g.CompleteIfActive(ctx, db, a))
	require.ErrorIs(t, g.CompleteIfActive(ctx, db, a), jobguard.ErrJobTerminal)

	// B: restarted, so the first execution is superseded; the second wins
	// through CompleteTx.
	idB := jobs.Insert(t, fixture.Job{Status: "QUEUED"})
	b1, err := sg.Start(ctx, db, idB)
	require.NoError(t, err)
	b2, err := sg.Start(ctx, db, idB)
	require.NoError(t, err)
	require.ErrorIs(t, g.CompleteIfProcessing(ctx, db, b1), jobguard.ErrJobTerminal)
	require.NoError(t, g.CompleteTx(ctx, db, b2, func(pgx.Tx) error { return nil }))

	// C: reclaimed (FAILED) while its execution ran.
	c, err := sg.Start(ctx, db, jobs.Insert(t, fixture.Job{Status: "QUEUED"}))
	require.NoError(t, err)
	require.NoError(t, g.Fail(ctx, db, c, jobguard.ReclaimedReasonDefault))
	require.ErrorIs(t, g.CompleteIfActive(ctx, db, c), jobguard.ErrJobTerminal)

	// A job that does not exist, and a database that is gone.
	require.ErrorIs(t, g.CompleteIfActive(ctx, db, jobguard.Execution{JobID: "7b0d4c6e-0000-4000-8000-000000000000", Generation: 1}), jobguard.ErrJobTerminal)
	closed := env.Connect(testenv.Config{})
	closed.Close()
	err = g.CompleteIfActive(ctx, closed, b2)
	require.Error(t, err)
	require.NotErrorIs(t, err, jobguard.ErrJobTerminal)

	outcome := metrics.KeyOutcome.String
	reason := metrics.KeyReason.String
	require.Equal(t, int64(2), r.Count(t, metrics.Completions, outcome("accepted")))
	require.Equal(t, int64(2), r.Count(t, metrics.Completions, outcome("refused"), reason("terminal")))
	require.Equal(t, int64(1), r.Count(t, metrics.Completions, outcome("refused"), reason("superseded")))
	require.Equal(t, int64(1), r.Count(t, metrics.Completions, outcome("refused"), reason("not_found")))
	require.Equal(t, int64(1), r.Count(t, metrics.Completions, outcome("error")))
	require.Equal(t, map[string]int64{"accepted": 2, "refused": 4, "error": 1},
		r.Counts(t, metrics.Completions, metrics.KeyOutcome))
	require.Equal(t, "{completion}", r.Unit(t, metrics.Completions))
}

func TestMetrics_StartRefusalsCountedBySource(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	ctx := context.Background()
	db := env.Pool
	r := metricstest.New(t)
	sg, err := jobguard.NewStartGuard(jobs.Guard, env.Redis, jobguard.StartGuardConfig{
		MeterProvider: r.Provider})
	require.NoError(t, err)

	// The database reason refuses Check and Start.
	byReason := jobs.Insert(t, fixture.Job{Status: "FAILED", Reason: jobguard.ReclaimedReasonDefault})
	require.ErrorIs(t, sg.Check(ctx, db, byReason), jobguard.ErrReclaimed)
	_, err = sg.Start(ctx, db, byReason)
	require.ErrorIs(t, err, jobguard.ErrReclaimed)

	// The marker alone refuses a job a late writer flipped back.
	exec, err := sg.Start(ctx, db, jobs.Insert(t, fixture.Job{Status: "QUEUED"}))
	require.NoError(t, err)
	require.NoError(t, sg.Markers().Write(ctx, marker.Marker{JobID: exec.JobID, Generation: exec.Generation, Reason: jobguard.ReclaimedReasonDefault}))
	_, err = sg.Start(ctx, db, exec.JobID)
	require.ErrorIs(t, err, jobguard.ErrReclaimed)

	// A job that starts, and one that is merely COMPLETED, are no reclaim
	// refusals.
	_, err = sg.Start(ctx, db, jobs.Insert(t, fixture.Job{Status: "QUEUED"}))
	require.NoError(t, err)
	_, err = sg.Start(ctx, db, jobs.Insert(t, fixture.Job{Status: "COMPLETED"}))
	require.ErrorIs(t, err, jobguard.ErrJobTerminal)

	require.Equal(t, map[string]int64{"database": 2, "marker": 1},
		r.Counts(t, metrics.StartRefusals, metrics.KeySource))
	require.Empty(t, r.Counts(t, metrics.StartLookupErrors, metrics.KeyLookup))
}

func TestMetrics_LookupErrorsCountedByPolicy(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	ctx := context.Background()
	r := metricstest.New(t)
	open, err := jobguard.NewStartGuard(jobs.Guard, deadRedis(t), jobguard.StartGuardConfig{
		Logger: slog.New(slog.DiscardHandler), MeterProvider: r.Provider})
	require.NoError(t, err)
	closed, err := jobguard.NewStartGuard(jobs.Guard, deadRedis(t), jobguard.StartGuardConfig{
		OnLookupError: jobguard.FailClosed, MeterProvider: r.Provider})
	require.NoError(t, err)
	id := jobs.Insert(t, fixture.Job{Status: "QUEUED"})

	_, err = closed.Start(ctx, env.Pool, id)
	require.ErrorIs(t, err, jobguard.ErrGuardUnavailable)
	_, err = open.Start(ctx, env.Pool, id)
	require.NoError(t, err)
	require.NoError(t, open.Check(ctx, env.Pool, id))

	lookup, policy := metrics.KeyLookup.String, metrics.KeyPolicy.String
	require.Equal(t, int64(2), r.Count(t, metrics.StartLookupErrors, lookup("marker"), policy("fail-open")))
	require.Equal(t, int64(1), r.Count(t, metrics.StartLookupErrors, lookup("marker"), policy("fail-closed")))
	require.Zero(t, r.Count(t, metrics.StartLookupErrors, lookup("database"), policy("fail-open")))
	require.Empty(t, r.Counts(t, metrics.StartRefusals, metrics.KeySource))
}

func TestMetrics_GuardWithoutProviderRecordsNothing(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	ctx := context.Background()
	r := metricstest.New(t)
	withNil, err := jobguard.NewWithConfig(ctx, env.Pool, jobs.Table, jobguard.GuardConfig{})
	require.NoError(t, err)
	counted := instrumented(t, jobs, r)

	exec := jobguard.Execution{JobID: jobs.Insert(t, fixture.Job{Status: "PROCESSING", Generation: 1}), Generation: 1}
	require.NoError(t, withNil.CompleteIfActive(ctx, env.Pool, exec))
	require.ErrorIs(t, jobs.Guard.CompleteIfActive(ctx, env.Pool, exec), jobguard.ErrJobTerminal)
	require.Empty(t, r.Counts(t, metrics.Completions, metrics.KeyOutcome))

	require.ErrorIs(t, counted.CompleteIfActive(ctx, env.Pool, exec), jobguard.ErrJobTerminal)
	require.Equal(t, map[string]int64{"refused": 1}, r.Counts(t, metrics.Completions, metrics.KeyOutcome))
}

func TestNewWithConfig_ValidatesLikeNew(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	r := metricstest.New(t)
	_, err := jobguard.NewWithConfig(context.Background(), env.Pool, jobguard.DefaultTable(),
		jobguard.GuardConfig{MeterProvider: r.Provider})
	require.ErrorContains(t, err, "jobguard: new:")
}

// Every series a guard can record exists from its start, at 0: in
// Prometheus a series that appears at 1 hides its first event from
// increase() and rate(), so a process's first late completion would fire
// no alert.
func TestMetrics_EverySeriesStartsAtZero(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	r := metricstest.New(t)
	instrumented(t, jobs, r)
	_, err := jobguard.NewStartGuard(jobs.Guard, env.Redis, jobguard.StartGuardConfig{MeterProvider: r.Provider})
	require.NoError(t, err)

	for _, kv := range [][]attribute.KeyValue{
		{metrics.KeyOutcome.String("accepted")},
		{metrics.KeyOutcome.String("error")},
		{metrics.KeyOutcome.String("refused"), metrics.KeyReason.String("terminal")},
		{metrics.KeyOutcome.String("refused"), metrics.KeyReason.String("superseded")},
		{metrics.KeyOutcome.String("refused"), metrics.KeyReason.String("not_found")},
		{metrics.KeyOutcome.String("refused"), metrics.KeyReason.String("unknown")},
	} {
		require.True(t, r.Has(t, metrics.Completions, kv...), "%v", kv)
		require.Zero(t, r.Count(t, metrics.Completions, kv...))
	}
	require.True(t, r.Has(t, metrics.StartRefusals, metrics.KeySource.String("marker")))
	require.True(t, r.Has(t, metrics.StartLookupErrors, metrics.KeyLookup.String("database"), metrics.KeyPolicy.String("fail-open")))
}
