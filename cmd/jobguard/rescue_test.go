package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/lease"
)

// sweep --rescue sends back to QUEUED, under a new generation, a job whose
// worker's lease is not live, whatever its limit; without --rescue the
// same sweep leaves it running.
func TestSweep_RescueSendsBackAJobWhoseWorkersLeaseLapsed(t *testing.T) {
	t.Parallel()
	b := setup(t, fixture.Default)
	b.env.Exec(lease.Migration)
	b.env.Exec(`ALTER TABLE ` + b.jobs.Table.QualifiedName() + ` ADD COLUMN IF NOT EXISTS lease_id text`)
	id := b.jobs.Insert(t, fixture.Job{Generation: 1})
	b.env.Exec(`UPDATE `+b.jobs.Table.QualifiedName()+` SET lease_id = 'a-worker-that-died' WHERE id = $1`, id)

	var rep reportJSON
	r := b.run(t, "sweep", "--json", "--owner-column", "lease_id")
	require.Equal(t, 0, r.code, r)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r)
	require.Zero(t, rep.Rescued)
	require.Equal(t, "PROCESSING", b.jobs.Read(t, id).Status, "no rescue unless asked for")

	r = b.run(t, "sweep", "--json", "--owner-column", "lease_id", "--rescue")
	require.Equal(t, 0, r.code, r)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r)
	require.Equal(t, 1, rep.Rescued, r)
	require.Equal(t, []string{id}, rep.RescuedIDs)
	row := b.jobs.Read(t, id)
	require.Equal(t, "QUEUED", row.Status)
	require.Equal(t, int64(2), row.Generation)
}
