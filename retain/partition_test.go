package retain_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/retain"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// Two jobs tables share the records table, which is partitioned by jobs
// table (a partition per jobs table). The sweep of the first table's
// settled records must leave the second table's pending record alone:
// it is still owed its billing.
func TestSweep_PartitionedRecordsTableKeepsAnotherPartitionsPendingRecord(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Config{MaxConns: 8})
	jobs := fixture.Create(t, env, fixture.Default)
	guard := jobs.NoRedis(t)
	key := guard.TableKey()
	env.Exec(usage.Migration)
	env.Exec(`CREATE TABLE job_settlements (
		jobs_table text NOT NULL, job_id text NOT NULL, generation bigint NOT NULL,
		state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'confirmed', 'given_up')),
		updates jsonb NOT NULL DEFAULT '[]', pending text[] NOT NULL DEFAULT '{}', usage jsonb NOT NULL DEFAULT '[]',
		attempts integer NOT NULL DEFAULT 0, next_attempt_at timestamptz NOT NULL DEFAULT now(), last_error text,
		created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now(), settled_at timestamptz,
		PRIMARY KEY (jobs_table, job_id, generation)) PARTITION BY LIST (jobs_table)`)
	env.Exec(`CREATE TABLE job_settlements_mine PARTITION OF job_settlements FOR VALUES IN ('` + key + `')`)
	env.Exec(`CREATE TABLE job_settlements_others PARTITION OF job_settlements DEFAULT`)
	env.Exec(settle.Migration)
	env.Exec(compensate.Migration)
	ctx := context.Background()
	settler, err := settle.New(ctx, settle.Config{Guard: guard, DB: env.Pool})
	require.NoError(t, err)

	// The other jobs table's record, still owed its billing.
	env.Exec(`INSERT INTO job_settlements (jobs_table, job_id, generation, state, usage)
		VALUES ('"other"."jobs"', 'owed', 1, 'pending', '[{"account": "a", "meter": "m", "quantity": 5}]')`)
	// This table's record, confirmed long ago.
	env.Exec(`INSERT INTO job_settlements (jobs_table, job_id, generation, state, settled_at)
		VALUES ($1, 'settled', 1, 'confirmed', now() - interval '40 days')`, key)

	sw, err := retain.New(retain.Config{DB: env.Pool, Tables: []retain.Table{{Rule: settler.Retention()}}})
	require.NoError(t, err)
	rep, err := sw.Sweep(ctx)
	require.NoError(t, err)
	t.Logf("removed %d", rep.Tables[0].Removed)

	var left []string
	rows, err := env.Pool.Query(ctx, `SELECT job_id || ':' || state FROM job_settlements ORDER BY job_id`)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		left = append(left, s)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"owed:pending"}, left, "only the settled record of this table goes")
}
