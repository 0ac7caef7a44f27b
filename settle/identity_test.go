package settle_test

import (
	"context"
	"errors"
	"fmt"
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

// TestSettle_TwoJobsTablesShareTheRecordsAndTheLedger runs job 42 of two
// integer-id jobs tables through one records table and one ledger, the
// defaults, along every path: each Finalize writes its own record, each
// sweep settles its own table's records only, a Reopen reopens only its
// own, and each job is billed once, including against a later Accrue.
func TestSettle_TwoJobsTablesShareTheRecordsAndTheLedger(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	env.Exec(usage.Migration)
	env.Exec(settle.Migration)
	env.Exec(productSchema)
	ctx := context.Background()
	names := []string{"tasks", "exports"}
	guards := map[string]*jobguard.Guard{}
	settlers := map[string]*settle.Settler{}
	faulty := map[string]*faults{}
	specs := map[string]settle.Spec{}
	exec := jobguard.Execution{JobID: "42", Generation: 1}
	for i, name := range names {
		env.Exec(fmt.Sprintf(`CREATE TABLE %s (
		    id bigint PRIMARY KEY,
		    status text NOT NULL,
		    generation bigint NOT NULL DEFAULT 0,
		    failure_reason text,
		    updated_at timestamptz NOT NULL DEFAULT now())`, name))
		env.Exec(fmt.Sprintf(`INSERT INTO %s (id, status, generation) VALUES (42, 'PROCESSING', 1)`, name))
		g, err := jobguard.New(ctx, env.Pool, jobguard.Table{Name: name, GenerationColumn: "generation"})
		require.NoError(t, err)
		guards[name] = g
		faulty[name] = &faults{}
		s, err := settle.New(ctx, quick(settle.Config{Guard: g, DB: env.Pool, Logger: discard(),
			Handlers: handlers(env.Pool, faulty[name], nil), Increments: increments(nil)}))
		require.NoError(t, err)
		settlers[name] = s
		vid := name + "-video"
		env.Exec(`INSERT INTO videos (id) VALUES ($1)`, vid)
		args := videoArgs{VideoID: vid, DurationMS: int64(100 * (i + 1))}
		specs[name] = settle.Spec{
			Updates: []settle.Update{{Name: "video", Args: args}},
			Usage:   []usage.Entry{{Account: "acct-1", Meter: "video_ms", Quantity: args.DurationMS}},
		}
	}
	records := func() map[string]int {
		rows, err := env.Pool.Query(ctx, `SELECT state, count(*) FROM job_settlements WHERE job_id = '42' GROUP BY state`)
		require.NoError(t, err)
		out := map[string]int{}
		var state string
		var n int
		_, err = pgx.ForEachRow(rows, []any{&state, &n}, func() error { out[state] = n; return nil })
		require.NoError(t, err)
		return out
	}

	// Both finalizes complete, both leave a record pending.
	for _, name := range names {
		faulty[name].set("video", 1)
		_, err := settlers[name].Finalize(ctx, env.Pool, exec, specs[name])
		require.ErrorIs(t, err, settle.ErrPending, "%s 42's completion commits with its own record", name)
	}
	require.Equal(t, map[string]int{"pending": 2}, records())

	// The tasks' sweep settles task 42 and leaves export 42 to its own.
	faulty["exports"].set("video", -1)
	sweepUntil(t, settlers["tasks"], func() bool { return records()["confirmed"] == 1 })
	rep, err := settlers["tasks"].Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Taken, "the tasks' sweep takes no record of an export")
	require.Equal(t, int64(100), accountMS(t, env))

	// The exports' sweep gives export 42 up; Reopen through the tasks'
	// settler finds nothing to reopen, through the exports' it reopens it.
	sweepUntil(t, settlers["exports"], func() bool { return records()["given_up"] == 1 })
	require.ErrorIs(t, settlers["tasks"].Reopen(ctx, exec), settle.ErrNotGivenUp)
	require.Equal(t, map[string]int{"confirmed": 1, "given_up": 1}, records())
	require.NoError(t, settlers["exports"].Reopen(ctx, exec))
	faulty["exports"].set("video", 0)
	sweepUntil(t, settlers["exports"], func() bool { return records()["confirmed"] == 2 })
	require.Equal(t, int64(300), accountMS(t, env), "each job 42 billed once")

	// A late Accrue of either job bills nothing again.
	for _, name := range names {
		fin, err := guards[name].Resume(ctx, env.Pool, exec, jobguard.FinalizeSpec{})
		require.NoError(t, err)
		acc, err := usage.Accrue(ctx, env.Pool, fin, specs[name].Usage[0], func(context.Context, pgx.Tx) error {
			return errors.New("billed again")
		})
		require.NoError(t, err)
		require.False(t, acc.Accrued, "%s 42 was billed by settle", name)
	}
	var ledger int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM usage_ledger WHERE job_id = '42'`).Scan(&ledger))
	require.Equal(t, 2, ledger)
	require.Equal(t, int64(300), accountMS(t, env))
}

// sweepUntil sweeps with s until done reports true, failing after a
// hundred sweeps that change nothing it waits for.
func sweepUntil(t *testing.T, s *settle.Settler, done func() bool) {
	t.Helper()
	for range 100 {
		if done() {
			return
		}
		_, err := s.Sweep(context.Background())
		require.NoError(t, err)
	}
	require.True(t, done(), "not done after a hundred sweeps")
}
