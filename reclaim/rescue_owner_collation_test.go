package reclaim_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
)

// An owner column under a case-insensitive collation would take the live
// lease "worker-a" for a dead "Worker-A"'s, and its job would never be
// rescued. New refuses such a column, as it refuses one for the id.
func TestNew_CaseInsensitiveOwnerColumnIsRefused(t *testing.T) {
	t.Parallel()
	b := rescueSetup(t)
	b.env.Exec(`CREATE COLLATION ci_owner (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
		DROP INDEX IF EXISTS jobs_owned_idx; ALTER TABLE jobs ALTER COLUMN lease_id TYPE text COLLATE ci_owner`)
	_, err := jobguard.New(context.Background(), b.env.Pool, b.jobs.Table)
	require.ErrorContains(t, err, `has the nondeterministic collation "ci_owner"`)
}
