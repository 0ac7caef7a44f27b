package retain_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/retain"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// bundle is one test's three side tables, their owners, and the jobs
// table they serve.
type bundle struct {
	env     *testenv.Env
	jobs    *fixture.Jobs
	guard   *jobguard.Guard
	settler *settle.Settler
	arts    *compensate.Artifacts
	markers *marker.PostgresStore
	key     string // the jobs table's key
}

func setup(t testing.TB) *bundle {
	t.Helper()
	env := testenv.New(t, testenv.Config{MaxConns: 16})
	jobs := fixture.Create(t, env, fixture.Default)
	env.Exec(usage.Migration)
	env.Exec(settle.Migration)
	env.Exec(compensate.Migration)
	b := &bundle{env: env, jobs: jobs, guard: jobs.NoRedis(t)}
	b.key = b.guard.TableKey()
	ctx := context.Background()
	var err error
	b.settler, err = settle.New(ctx, settle.Config{Guard: b.guard, DB: env.Pool})
	require.NoError(t, err)
	b.arts, err = compensate.New(ctx, compensate.Config{Guard: b.guard, DB: env.Pool,
		Compensators: map[string]compensate.Func{"file": func(context.Context, pgx.Tx, compensate.Artifact) error { return nil }}})
	require.NoError(t, err)
	b.markers, err = marker.NewPostgresStore(b.guard, marker.Config{})
	require.NoError(t, err)
	return b
}

// sweeper sweeps the three tables with their defaults, changed by cfg.
func (b *bundle) sweeper(t testing.TB, cfg retain.Config) *retain.Sweeper {
	t.Helper()
	cfg.DB = b.env.Pool
	if cfg.Tables == nil {
		cfg.Tables = []retain.Table{{Rule: b.settler.Retention()}, {Rule: b.arts.Retention()}, {Rule: b.markers.Retention()}}
	}
	sw, err := retain.New(cfg)
	require.NoError(t, err)
	return sw
}

// record inserts a finalize record of this jobs table, state as given,
// settled ago before the database's now (NULL when pending).
func (b *bundle) record(t testing.TB, id, state, ago string) {
	t.Helper()
	b.env.Exec(`INSERT INTO job_settlements (jobs_table, job_id, generation, state, settled_at, created_at)
		VALUES ($1, $2, 1, $3, CASE WHEN $3 <> 'pending' THEN now() - $4::interval END, now() - $4::interval)`,
		b.key, id, state, ago)
}

// artifact inserts an artifact of this jobs table, last changed ago before
// the database's now.
func (b *bundle) artifact(t testing.TB, job, ref, state string, recheck bool, ago string) {
	t.Helper()
	b.env.Exec(`INSERT INTO job_artifacts (jobs_table, job_id, generation, kind, ref, state, recheck_at, changed_at)
		VALUES ($1, $2, 1, 'file', $3, $4, CASE WHEN $5 THEN now() END, now() - $6::interval)`,
		b.key, job, ref, state, recheck, ago)
}

// marker inserts a marker of job that expired ago before the database's
// now (negative: expires in the future).
func (b *bundle) marker(t testing.TB, job, ago string) {
	t.Helper()
	b.env.Exec(`INSERT INTO job_reclaim_markers (jobs_table, job_id, generation, reason, reclaimed_at, expires_at)
		VALUES ($1, $2, 1, 'reclaimed', now() - $3::interval - interval '7 days', now() - $3::interval)`, b.key, job, ago)
}

// ids returns the job ids left in table, sorted.
func (b *bundle) ids(t testing.TB, table string) []string {
	t.Helper()
	rows, err := b.env.Pool.Query(context.Background(), `SELECT job_id FROM `+table+` ORDER BY job_id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

func (b *bundle) count(t testing.TB, table string) int {
	t.Helper()
	var n int
	require.NoError(t, b.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&n))
	return n
}
