package settle_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// TestMigration_EarlierRecordsAreSettledUnderTheDefaultJobsTable: a record
// left pending before the records were keyed by the jobs table is given
// the key of the table named jobs, and the sweep of that table's Settler
// settles and bills it; the files run again without a change.
func TestMigration_EarlierRecordsAreSettledUnderTheDefaultJobsTable(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	jobs := fixture.Create(t, env, fixture.Default)
	env.Exec(productSchema)
	first, err := fs.ReadFile(settle.MigrationFiles, "0001_job_settlements.sql")
	require.NoError(t, err)
	env.Exec(string(first))
	id := jobs.Insert(t, fixture.Job{Generation: 1, Status: "COMPLETED"})
	vid := "video-" + id
	env.Exec(`INSERT INTO videos (id) VALUES ($1)`, vid)
	args, err := json.Marshal([]map[string]any{{"name": "video", "args": videoArgs{VideoID: vid, DurationMS: 10}}})
	require.NoError(t, err)
	env.Exec(`INSERT INTO job_settlements (job_id, generation, pending, updates, usage)
	    VALUES ($1, 1, '{video}', $2::jsonb, '[{"account": "acct-1", "meter": "video_ms", "quantity": 10}]')`, id, string(args))

	env.Exec(usage.Migration)
	env.Exec(settle.Migration)
	env.Exec(settle.Migration)
	var key string
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT jobs_table FROM job_settlements WHERE job_id = $1`, id).Scan(&key))
	require.Equal(t, jobs.Guard.TableKey(), key)

	b := &bundle{env: env, jobs: jobs, faults: &faults{}, hooks: &hooks{}, logs: &testenv.Logs{}}
	rep := b.settleAll(t, b.settler(t, quick(settle.Config{})))
	require.Equal(t, 1, rep.Settled)
	require.Equal(t, int64(10), accountMS(t, env))
}
