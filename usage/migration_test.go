package usage_test

import (
	"context"
	"io/fs"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/usage"
)

// firstLedger creates the ledger as the first migration file alone made
// it, keyed by (job_id, meter), with one accrual of job 7 in it.
func firstLedger(t *testing.T, env *testenv.Env) {
	t.Helper()
	first, err := fs.ReadFile(usage.MigrationFiles, "0001_usage_ledger.sql")
	require.NoError(t, err)
	env.Exec(string(first))
	env.Exec(`INSERT INTO usage_ledger (job_id, meter, generation, account, quantity) VALUES ('7', 'video_seconds', 1, 'acct-1', 90)`)
}

// TestMigration_KeysEarlierRowsByTheDefaultJobsTable: a ledger that has
// rows from before it was keyed by the jobs table gives them the key of
// the table named jobs; an Accrue of that job afterwards finds its row,
// and the file runs again without a change.
func TestMigration_KeysEarlierRowsByTheDefaultJobsTable(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	firstLedger(t, env)
	jobs := fixture.Create(t, env, fixture.IntID)
	env.Exec(`CREATE TABLE jobs (id bigint PRIMARY KEY, status text NOT NULL, generation bigint NOT NULL DEFAULT 0,
	    failure_reason text, updated_at timestamptz NOT NULL DEFAULT now())`)
	env.Exec(`INSERT INTO jobs (id, status, generation) VALUES (7, 'PROCESSING', 1)`)
	g, err := jobguard.New(ctx, env.Pool, jobguard.Table{Name: "jobs", GenerationColumn: "generation"})
	require.NoError(t, err)
	env.Exec(usage.Migration)
	env.Exec(usage.Migration)

	var key string
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT jobs_table FROM usage_ledger WHERE job_id = '7'`).Scan(&key))
	require.Equal(t, g.TableKey(), key)
	require.Equal(t, `"`+env.Schema+`"."jobs"`, key)

	fin, err := g.Finalize(ctx, env.Pool, jobguard.Execution{JobID: "007", Generation: 1}, jobguard.FinalizeSpec{})
	require.NoError(t, err)
	acc, err := usage.Accrue(ctx, env.Pool, fin, entry, func(context.Context, pgx.Tx) error { return nil })
	require.NoError(t, err)
	require.False(t, acc.Accrued, "the job was billed before the migration")
	require.EqualValues(t, 90, acc.Entry.Quantity)

	// Job 7 of another table is another job.
	jobs.Insert(t, fixture.Job{ID: "7", Generation: 1})
	fin, err = jobs.Guard.Finalize(ctx, env.Pool, jobguard.Execution{JobID: "7", Generation: 1}, jobguard.FinalizeSpec{})
	require.NoError(t, err)
	acc, err = usage.Accrue(ctx, env.Pool, fin, entry, func(context.Context, pgx.Tx) error { return nil })
	require.NoError(t, err)
	require.True(t, acc.Accrued)
}

// TestMigration_EarlierRowsOfAnUnknownJobsTableStopIt: with no table named
// jobs and no setting to name one, the file refuses to guess; with the
// setting, it keys the rows by the table it names.
func TestMigration_EarlierRowsOfAnUnknownJobsTableStopIt(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	firstLedger(t, env)
	jobs := fixture.Create(t, env, fixture.Prisma)

	_, err := env.Pool.Exec(ctx, usage.Migration)
	require.ErrorContains(t, err, "usage_ledger has rows whose jobs table is unknown")

	conn, err := env.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SELECT set_config('jobguard.jobs_table', $1, false)`, jobs.Guard.TableKey())
	require.NoError(t, err)
	_, err = conn.Exec(ctx, usage.Migration)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `RESET jobguard.jobs_table`)
	require.NoError(t, err)
	var key string
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT jobs_table FROM usage_ledger WHERE job_id = '7'`).Scan(&key))
	require.Equal(t, jobs.Guard.TableKey(), key)
	env.Exec(usage.Migration) // every row has its key: nothing to guess
}
