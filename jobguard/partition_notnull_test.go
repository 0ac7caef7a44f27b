package jobguard_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

// The rows of a partitioned jobs table live in its partitions, and a
// partition may refuse NULL in a column its parent admits. The guard
// writes NULL to the failure reason (Retry, an orphan's reset): a mapping
// New accepts takes that write on every row, or New refuses it.
func TestNew_PartitionRefusingNullInAClearedColumnIsRefusedOrTakesTheWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	env.Exec(`CREATE TABLE part_jobs (id uuid PRIMARY KEY, status text NOT NULL,
		updated_at timestamptz NOT NULL DEFAULT now(), failure_reason text, generation integer NOT NULL DEFAULT 0)
		PARTITION BY HASH (id);
	CREATE TABLE part_jobs_0 PARTITION OF part_jobs FOR VALUES WITH (MODULUS 1, REMAINDER 0);
	ALTER TABLE part_jobs_0 ALTER COLUMN failure_reason SET NOT NULL;
	INSERT INTO part_jobs (id, status, failure_reason) VALUES ('6f1c3a52-8d0e-4c1b-9a57-0c2f8e4d9b11', 'FAILED', 'boom')`)
	g, err := jobguard.New(ctx, env.Pool, jobguard.Table{Name: "part_jobs", GenerationColumn: "generation"})
	if err != nil {
		require.Contains(t, err.Error(), "FailureReasonColumn")
		return
	}
	_, err = g.Retry(ctx, env.Pool, "6f1c3a52-8d0e-4c1b-9a57-0c2f8e4d9b11")
	require.NoError(t, err, "a mapping New accepted takes the guard's writes")
}

// An inheritance child holds rows of its parent too: the same rule holds
// for a child refusing NULL in a column its parent admits.
func TestNew_InheritingTableRefusingNullInAClearedColumnIsRefusedOrTakesTheWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	env.Exec(`CREATE TABLE kin_jobs (id uuid PRIMARY KEY, status text NOT NULL,
		updated_at timestamptz NOT NULL DEFAULT now(), failure_reason text, generation integer NOT NULL DEFAULT 0);
	CREATE TABLE kin_jobs_old () INHERITS (kin_jobs);
	ALTER TABLE kin_jobs_old ALTER COLUMN failure_reason SET NOT NULL;
	INSERT INTO kin_jobs_old (id, status, failure_reason) VALUES ('6f1c3a52-8d0e-4c1b-9a57-0c2f8e4d9b12', 'FAILED', 'boom')`)
	g, err := jobguard.New(ctx, env.Pool, jobguard.Table{Name: "kin_jobs", GenerationColumn: "generation"})
	if err != nil {
		require.Contains(t, err.Error(), "FailureReasonColumn")
		return
	}
	_, err = g.Retry(ctx, env.Pool, "6f1c3a52-8d0e-4c1b-9a57-0c2f8e4d9b12")
	require.NoError(t, err, "a mapping New accepted takes the guard's writes")
}
