package settle_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// TestFinalize_EverySpellingOfAJobIsOneRecordAndOneBill finalizes a job
// through one spelling of its id and bills it once; then every other
// spelling of it (a late Accrue of a resumed finalize, a Reopen, a second
// Finalize) finds that one record and that one ledger row, and bills
// nothing again.
func TestFinalize_EverySpellingOfAJobIsOneRecordAndOneBill(t *testing.T) {
	t.Parallel()
	fixture.EachVariant(t, func(t *testing.T, jobs *fixture.Jobs) {
		env := jobs.Env
		env.Exec(usage.Migration)
		env.Exec(settle.Migration)
		env.Exec(productSchema)
		b := &bundle{env: env, jobs: jobs, faults: &faults{}, hooks: &hooks{}}
		s := b.settler(t, quick(settle.Config{Logger: discard()}))
		ctx := context.Background()
		gen := int64(1)
		if !jobs.Guard.Fenced() {
			gen = 0
		}
		sample := jobs.Spellings(jobs.Insert(t, fixture.Job{}))
		for _, name := range sample {
			t.Run(name.Name, func(t *testing.T) {
				id := jobs.Insert(t, fixture.Job{Generation: gen})
				spellings := jobs.Spellings(id)
				var spelled string
				for _, sp := range spellings {
					if sp.Name == name.Name {
						spelled = sp.ID
					}
				}
				vid := "video-" + id
				env.Exec(`INSERT INTO videos (id) VALUES ($1)`, vid)
				args := videoArgs{VideoID: vid, DurationMS: 10}
				spec := settle.Spec{
					Updates: []settle.Update{{Name: "video", Args: args}},
					Usage:   []usage.Entry{{Account: "acct-1", Meter: "video_ms", Quantity: 10}},
				}
				b.faults.set("video", 1)
				res, err := s.Finalize(ctx, env.Pool, jobguard.Execution{JobID: spelled, Generation: gen}, spec)
				require.ErrorIs(t, err, settle.ErrPending)
				assert.Equal(t, id, res.Finalized.Execution().JobID, "Finalize's result names the job by its canonical id")
				b.settleAll(t, s)

				before := accountMS(t, env)
				for _, sp := range spellings {
					exec := jobguard.Execution{JobID: sp.ID, Generation: gen}
					fin, err := jobs.Guard.Resume(ctx, env.Pool, exec, jobguard.FinalizeSpec{})
					if !assert.NoError(t, err, "Resume through %s %q", sp.Name, sp.ID) {
						continue
					}
					acc, err := usage.Accrue(ctx, env.Pool, fin, spec.Usage[0], func(context.Context, pgx.Tx) error {
						return errors.New("billed again")
					})
					assert.NoError(t, err, "Accrue through %s %q", sp.Name, sp.ID)
					assert.False(t, acc.Accrued, "Accrue through %s %q after settle billed", sp.Name, sp.ID)
					assert.ErrorIs(t, s.Reopen(ctx, exec), settle.ErrNotGivenUp, "Reopen through %s %q", sp.Name, sp.ID)
					_, err = s.Finalize(ctx, env.Pool, exec, spec)
					assert.ErrorIs(t, err, jobguard.ErrJobTerminal, "Finalize through %s %q", sp.Name, sp.ID)
				}
				require.Equal(t, before, accountMS(t, env), "nothing billed twice")
				var records, ledger []string
				require.NoError(t, env.Pool.QueryRow(ctx, `SELECT
					(SELECT array_agg(job_id || ':' || state) FROM job_settlements WHERE job_id IN ($1, $2)),
					(SELECT array_agg(job_id) FROM usage_ledger WHERE job_id IN ($1, $2))`, id, spelled).Scan(&records, &ledger))
				require.Equal(t, []string{id + ":confirmed"}, records)
				require.Equal(t, []string{id}, ledger)
			})
		}
	})
}

func accountMS(t *testing.T, env *testenv.Env) int64 {
	t.Helper()
	var ms int64
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT video_ms FROM accounts WHERE id = 'acct-1'`).Scan(&ms))
	return ms
}
