package compensate_test

import (
	"context"
	"fmt"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
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

// TestArtifacts_TwoJobsTablesShareTheArtifactsTable records an artifact of
// job 42 in each of two integer-id jobs tables, in the one default
// artifacts table. Task 42 is reclaimed, export 42 completes: the tasks'
// sweep compensates the task's file only, the exports' sweep keeps the
// export's, and neither decides the other's by the other's row.
func TestArtifacts_TwoJobsTablesShareTheArtifactsTable(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	env.Exec(compensate.Migration)
	ctx := context.Background()
	files := newStorage()
	tasks, exports := intJobs(t, env, "tasks"), intJobs(t, env, "exports")
	arts := map[string]*compensate.Artifacts{}
	for name, g := range map[string]*jobguard.Guard{"tasks": tasks, "exports": exports} {
		env.Exec(fmt.Sprintf(`INSERT INTO %s (id, status, generation) VALUES (42, 'PROCESSING', 1)`, name))
		a, err := compensate.New(ctx, compensate.Config{Guard: g, DB: env.Pool,
			Compensators: map[string]compensate.Func{"file": files.compensate}})
		require.NoError(t, err)
		arts[name] = a
		require.NoError(t, a.Record(ctx, env.Pool, jobguard.Execution{JobID: "42", Generation: 1}, "file", name+"/42"))
	}
	exec := jobguard.Execution{JobID: "42", Generation: 1}
	require.NoError(t, tasks.Fail(ctx, env.Pool, exec, jobguard.ReclaimedReasonDefault))

	// The tasks' sweep first: task 42 failed, export 42 is still running.
	rep, err := arts["tasks"].Compensate(ctx)
	require.NoError(t, err)
	require.Equal(t, compensate.Report{Rejected: 1, Compensated: 1}, rep, "the tasks' sweep")
	require.Equal(t, map[string]int{"tasks/42": 1}, files.undoneRefs(), "only the task's file is undone")

	rep, err = arts["exports"].Compensate(ctx)
	require.NoError(t, err)
	require.Equal(t, compensate.Report{}, rep, "export 42 is still running: nothing to decide")

	fin, err := arts["exports"].Finalize(ctx, env.Pool, exec, jobguard.FinalizeSpec{})
	require.NoError(t, err)
	require.True(t, fin.Confirmed())
	for _, name := range []string{"tasks", "exports"} {
		rep, err := arts[name].Compensate(ctx)
		require.NoError(t, err)
		require.Equal(t, compensate.Report{}, rep, "the %s' sweep after export 42 completed", name)
	}
	var states []string
	rows, err := env.Pool.Query(ctx, `SELECT ref || ':' || state FROM job_artifacts ORDER BY ref`)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		states = append(states, s)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"exports/42:kept", "tasks/42:done"}, states)
	require.Equal(t, map[string]int{"tasks/42": 1}, files.undoneRefs())
}

// intJobs creates a jobs table with bigint ids under name and returns a
// guard over it.
func intJobs(t *testing.T, env *testenv.Env, name string) *jobguard.Guard {
	t.Helper()
	env.Exec(fmt.Sprintf(`CREATE TABLE %s (
	    id bigint PRIMARY KEY,
	    status text NOT NULL,
	    generation bigint NOT NULL DEFAULT 0,
	    failure_reason text,
	    updated_at timestamptz NOT NULL DEFAULT now())`, name))
	g, err := jobguard.New(context.Background(), env.Pool, jobguard.Table{Name: name, GenerationColumn: "generation"})
	require.NoError(t, err)
	return g
}

// TestMigration_EarlierArtifactsAreKeyedByTheDefaultJobsTable: artifacts
// recorded before they named their jobs table are given the key of the
// table named jobs, and that table's sweep compensates them; the files run
// again without a change.
func TestMigration_EarlierArtifactsAreKeyedByTheDefaultJobsTable(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	jobs := fixture.Create(t, env, fixture.Default)
	var sql string
	for _, name := range []string{"0001_job_artifacts.sql", "0002_job_artifacts_recheck.sql"} {
		b, err := fs.ReadFile(compensate.MigrationFiles, name)
		require.NoError(t, err)
		sql += string(b)
	}
	env.Exec(sql)
	id := jobs.Insert(t, fixture.Job{Generation: 1})
	env.Exec(`INSERT INTO job_artifacts (job_id, generation, kind, ref) VALUES ($1, 1, 'file', 'a.mp4')`, id)
	env.Exec(compensate.Migration)
	env.Exec(compensate.Migration)
	var key string
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT jobs_table FROM job_artifacts`).Scan(&key))
	require.Equal(t, jobs.Guard.TableKey(), key)

	files := newStorage()
	arts, err := compensate.New(ctx, compensate.Config{Guard: jobs.Guard, DB: env.Pool,
		Compensators: map[string]compensate.Func{"file": files.compensate}})
	require.NoError(t, err)
	require.NoError(t, jobs.Guard.Fail(ctx, env.Pool, jobguard.Execution{JobID: id, Generation: 1}, jobguard.ReclaimedReasonDefault))
	rep, err := arts.Compensate(ctx)
	require.NoError(t, err)
	require.Equal(t, compensate.Report{Rejected: 1, Compensated: 1}, rep)
	require.Equal(t, map[string]int{"a.mp4": 1}, files.undoneRefs())
}
