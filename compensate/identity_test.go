package compensate_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
)

// TestArtifacts_EverySpellingOfAJobIsOneExecution records one artifact
// through every spelling of its job's id: one row, keyed by the canonical
// id. A Finalize through any spelling keeps it; of another job, a rejected
// execution's CompensateExecution through any spelling compensates it
// once.
func TestArtifacts_EverySpellingOfAJobIsOneExecution(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		if !jobs.Guard.Fenced() {
			t.Skip("compensate needs a generation column")
		}
		ctx := context.Background()
		env := jobs.Env
		env.Exec(compensate.Migration)
		b := &bundle{env: env, jobs: jobs, files: newStorage()}
		b.arts = b.newArtifacts(t, env.Pool)
		keys := func(id string) []string {
			rows, err := env.Pool.Query(ctx, `SELECT job_id || '/' || ref || '/' || state FROM job_artifacts WHERE ref LIKE $1 || '%' ORDER BY 1`, id)
			require.NoError(t, err)
			var out []string
			for rows.Next() {
				var k string
				require.NoError(t, rows.Scan(&k))
				out = append(out, k)
			}
			require.NoError(t, rows.Err())
			return out
		}

		kept := jobs.Insert(t, fixture.Job{Generation: 1})
		spellings := jobs.Spellings(kept)
		for _, sp := range spellings {
			require.NoError(t, b.arts.Record(ctx, env.Pool, jobguard.Execution{JobID: sp.ID, Generation: 1}, "file", kept+".mp4"),
				"Record through %s %q", sp.Name, sp.ID)
		}
		require.Equal(t, []string{kept + "/" + kept + ".mp4/pending"}, keys(kept))
		last := jobguard.Execution{JobID: spellings[len(spellings)-1].ID, Generation: 1}
		fin, err := b.arts.Finalize(ctx, env.Pool, last, jobguard.FinalizeSpec{})
		require.NoError(t, err)
		require.Equal(t, kept, fin.Execution().JobID)
		require.Equal(t, []string{kept + "/" + kept + ".mp4/kept"}, keys(kept))

		lost := jobs.Insert(t, fixture.Job{Generation: 1})
		spellings = jobs.Spellings(lost)
		for _, sp := range spellings {
			require.NoError(t, b.arts.Record(ctx, env.Pool, jobguard.Execution{JobID: sp.ID, Generation: 1}, "file", lost+".mp4"),
				"Record through %s %q", sp.Name, sp.ID)
		}
		last = jobguard.Execution{JobID: spellings[len(spellings)-1].ID, Generation: 1}
		require.NoError(t, jobs.Guard.Fail(ctx, env.Pool, last, jobguard.ReclaimedReasonDefault))
		rep, err := b.arts.CompensateExecution(ctx, last)
		require.NoError(t, err)
		require.Equal(t, compensate.Report{Rejected: 1, Compensated: 1}, rep)
		require.Equal(t, []string{lost + "/" + lost + ".mp4/done"}, keys(lost))
		for _, sp := range spellings {
			err := b.arts.Record(ctx, env.Pool, jobguard.Execution{JobID: sp.ID, Generation: 1}, "file", lost+".mp4")
			require.ErrorIs(t, err, compensate.ErrCompensated, "Record through %s %q", sp.Name, sp.ID)
		}
		require.Len(t, keys(lost), 1)
	})
}
