package jobguard_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/metrics"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/metricstest"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

// A completion whose statement the database refuses (here: it cannot lock
// the jobs table, which a migration holds, within lock_timeout) is a
// completion that failed: CompleteTx counts it as an error and names the
// completion, not BEGIN, as what failed.
func TestCompleteTx_ACompletionTheDatabaseFailsIsCountedAsAnError(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	ctx := context.Background()
	r := metricstest.New(t)
	g := instrumented(t, jobs, r)
	exec := jobguard.Execution{JobID: jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}

	migration, err := env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = migration.Rollback(ctx) }()
	_, err = migration.Exec(ctx, `LOCK TABLE `+g.TableKey()+` IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	cfg, err := pgxpool.ParseConfig(env.DatabaseURL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "50ms"
	worker, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer worker.Close()
	ran := false
	err = g.CompleteTx(ctx, worker, exec, func(pgx.Tx) error { ran = true; return nil })
	require.Error(t, err)
	require.NotErrorIs(t, err, jobguard.ErrJobTerminal)
	require.False(t, ran)
	require.NotContains(t, err.Error(), "begin:", "BEGIN did not fail: the completion did")
	require.NoError(t, migration.Rollback(ctx))

	outcome := metrics.KeyOutcome.String
	require.Equal(t, int64(1), r.Count(t, metrics.Completions, outcome("error")),
		"the failed completion is counted (%v)", err)
	require.Equal(t, jobs.Table.Statuses.Processing, jobs.Read(t, exec.JobID).Status)
}
