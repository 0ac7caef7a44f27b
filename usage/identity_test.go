package usage_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/usage"
)

// TestAccrue_EverySpellingOfAJobIsOneLedgerRow confirms one job's finalize
// through every spelling of its id (Finalize once, Resume for the rest)
// and accrues each: one accrual, one ledger row keyed by the canonical id,
// through Accrue and AccrueTx alike.
func TestAccrue_EverySpellingOfAJobIsOneLedgerRow(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		env := jobs.Env
		env.Exec(usage.Migration)
		ctx := context.Background()
		id := jobs.Insert(t, fixture.Job{Generation: 1})
		var fins []jobguard.Finalized
		for i, sp := range jobs.Spellings(id) {
			exec := jobguard.Execution{JobID: sp.ID, Generation: 1}
			finalize := jobs.Guard.Resume
			if i == 0 {
				finalize = jobs.Guard.Finalize
			}
			fin, err := finalize(ctx, env.Pool, exec, jobguard.FinalizeSpec{})
			if !assert.NoError(t, err, "%s %q", sp.Name, sp.ID) {
				continue // the other spellings still show what they bill
			}
			require.True(t, fin.Confirmed())
			fins = append(fins, fin)
		}
		var increments int
		inc := func(context.Context, pgx.Tx) error { increments++; return nil }
		accrued := 0
		for i, fin := range fins {
			var acc usage.Accrual
			var err error
			if i%2 == 0 {
				acc, err = usage.Accrue(ctx, env.Pool, fin, entry, inc)
			} else {
				acc, err = accrueTx(t, env, fin, inc)
			}
			require.NoError(t, err)
			assert.Equal(t, id, acc.Execution.JobID, "the accrual names the job by its canonical id")
			if acc.Accrued {
				accrued++
			}
		}
		require.Equal(t, 1, accrued, "one job, one accrual, however its id was spelled")
		require.Equal(t, 1, increments)
		var keys []string
		rows, err := env.Pool.Query(ctx, `SELECT job_id FROM usage_ledger`)
		require.NoError(t, err)
		keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Equal(t, []string{id}, keys)
	})
}

// accrueTx runs AccrueTx in a transaction of its own and commits it.
func accrueTx(t *testing.T, env *testenv.Env, fin jobguard.Finalized, inc func(context.Context, pgx.Tx) error) (usage.Accrual, error) {
	t.Helper()
	ctx := context.Background()
	ledger, err := usage.NewLedger(usage.Config{})
	require.NoError(t, err)
	tx, err := env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	acc, err := ledger.AccrueTx(ctx, tx, fin, entry, inc)
	if err != nil {
		return acc, err
	}
	return acc, tx.Commit(ctx)
}

// TestAccrue_TwoJobsTablesShareTheLedger bills job 42 of two integer-id
// jobs tables into the one default ledger: each is billed once, neither
// is taken for the other.
func TestAccrue_TwoJobsTablesShareTheLedger(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	env.Exec(usage.Migration)
	ctx := context.Background()
	var increments []string
	for _, name := range []string{"tasks", "exports"} {
		g := intJobsTable(t, env, name)
		env.Exec(fmt.Sprintf(`INSERT INTO %s (id, status, generation) VALUES (42, 'PROCESSING', 1)`, name))
		fin, err := g.Finalize(ctx, env.Pool, jobguard.Execution{JobID: "42", Generation: 1}, jobguard.FinalizeSpec{})
		require.NoError(t, err)
		for range 2 {
			acc, err := usage.Accrue(ctx, env.Pool, fin, entry, func(context.Context, pgx.Tx) error {
				increments = append(increments, name)
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, "42", acc.Execution.JobID)
		}
	}
	require.Equal(t, []string{"tasks", "exports"}, increments, "job 42 of each table is billed, once")
	var rows int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM usage_ledger WHERE job_id = '42'`).Scan(&rows))
	require.Equal(t, 2, rows)
}

// intJobsTable creates a jobs table with bigint ids under name in env's
// schema and returns a guard over it.
func intJobsTable(t *testing.T, env *testenv.Env, name string) *jobguard.Guard {
	t.Helper()
	env.Exec(fmt.Sprintf(`CREATE TABLE %s (
	    id bigint PRIMARY KEY,
	    status text NOT NULL,
	    generation bigint NOT NULL DEFAULT 0,
	    failure_reason text,
	    updated_at timestamptz NOT NULL DEFAULT now())`, name))
	g, err := jobguard.New(context.Background(), env.Pool, jobguard.Table{Name: name, GenerationColumn: "generation"})
	require.NoError(t, err)
	return g
}
