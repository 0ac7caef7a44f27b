package settle_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// On a jobs table without a generation column the record's generation is
// 0, whatever Generation the execution carries (jobguard ignores it there):
// the record and its bill are keyed by (job, 0), and an operator reopens a
// given-up record of such a table as the job's execution 0.
func TestFinalize_RecordOfATableWithoutGenerationIsGenerationZero(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.NoGeneration)
	env.Exec(usage.Migration)
	env.Exec(settle.Migration)
	env.Exec(productSchema)
	b := &bundle{env: env, jobs: jobs, faults: &faults{}, hooks: &hooks{}}
	s := b.settler(t, quick(settle.Config{Logger: discard(), MaxAttempts: 1}))
	ctx := context.Background()
	id := jobs.Insert(t, fixture.Job{})
	vid := "video-" + id
	env.Exec(`INSERT INTO videos (id) VALUES ($1)`, vid)
	b.faults.set("video", -1)

	_, err := s.Finalize(ctx, env.Pool, jobguard.Execution{JobID: id, Generation: 7}, settle.Spec{
		Updates: []settle.Update{{Name: "video", Args: videoArgs{VideoID: vid, DurationMS: 10}}},
		Usage:   []usage.Entry{{Account: "acct-1", Meter: "video_ms", Quantity: 10}},
	})
	require.ErrorIs(t, err, settle.ErrPending)
	var generation int64
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT generation FROM job_settlements WHERE job_id = $1`, id).Scan(&generation))
	require.Zero(t, generation, "the record of a table without a generation column")

	rep := b.settleAll(t, s)
	require.Equal(t, 1, rep.GivenUp)
	b.faults.set("video", 0)
	require.NoError(t, s.Reopen(ctx, jobguard.Execution{JobID: id}), "reopened as execution 0")
	b.settleAll(t, s)
	var rows int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM usage_ledger WHERE job_id = $1 AND generation = 0`, id).Scan(&rows))
	require.Equal(t, 1, rows, "billed once, as execution 0")
}
