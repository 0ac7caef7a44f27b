package reclaim_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
)

// An owner column of char(n) would give back a lease id that ends in a
// space without it, naming no lease: the rescue would take a live
// worker's running job. New refuses such a column.
func TestNew_CharOwnerColumnIsRefused(t *testing.T) {
	t.Parallel()
	b := rescueSetup(t)
	b.env.Exec(`DROP INDEX IF EXISTS jobs_owned_idx; ALTER TABLE jobs ALTER COLUMN lease_id TYPE char(64)`)
	_, err := jobguard.New(context.Background(), b.env.Pool, b.jobs.Table)
	require.ErrorContains(t, err, `column "lease_id" (OwnerColumn) of "jobs" is bpchar; want text or varchar`)
}
