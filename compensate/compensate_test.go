package compensate_test

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/usage"
)

func TestFinalize_RejectedCompletionCompensatesExactlyThatExecution(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.env.Exec(usage.Migration)
	id := b.jobs.Insert(t, fixture.Job{Generation: 1})
	stale := jobguard.Execution{JobID: id, Generation: 1}
	staleFile, staleAsset := b.produce(t, stale)

	// The job is reclaimed and restarted: generation 2 runs and produces its
	// own artifacts, while generation 1 is still out there.
	require.NoError(t, b.jobs.Guard.Fail(ctx, b.env.Pool, stale, jobguard.ReclaimedReasonDefault))
	b.restart(t, id, 2)
	current := jobguard.Execution{JobID: id, Generation: 2}
	currentFile, currentAsset := b.produce(t, current)
	other := jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
	otherFile, otherAsset := b.produce(t, other)

	ran := false
	fin, err := b.arts.Finalize(ctx, b.env.Pool, stale, jobguard.FinalizeSpec{
		Updates: []jobguard.Update{{Name: "video", Run: func(context.Context) error { ran = true; return nil }}},
	})
	require.ErrorIs(t, err, jobguard.ErrJobTerminal)
	require.True(t, fin.Rejected())
	require.False(t, ran, "no metadata update runs after a rejected completion")
	_, err = usage.Accrue(ctx, b.env.Pool, fin, usage.Entry{Account: "a", Meter: "video_seconds", Quantity: 1}, nil)
	require.ErrorIs(t, err, usage.ErrNotConfirmed)
	var ledger int
	require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT count(*) FROM usage_ledger`).Scan(&ledger))
	require.Zero(t, ledger, "no usage for a rejected completion")

	require.Equal(t, map[string]int{staleFile: 1}, b.files.undoneRefs(), "only the stale execution's file is compensated")
	require.False(t, b.assetExists(t, staleAsset), "the stale execution's asset row is deleted")
	require.True(t, b.assetExists(t, currentAsset))
	require.True(t, b.assetExists(t, otherAsset))
	require.Equal(t, map[string]string{staleFile: "done", staleAsset: "done"}, b.states(t, stale))
	require.Equal(t, map[string]string{currentFile: "pending", currentAsset: "pending"}, b.states(t, current))
	require.Equal(t, map[string]string{otherFile: "pending", otherAsset: "pending"}, b.states(t, other))
}

func TestFinalize_ReclaimedJobCompensatesItsArtifacts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.jobs.Insert(t, fixture.Job{Generation: 1})
	exec := jobguard.Execution{JobID: id, Generation: 1}
	file, asset := b.produce(t, exec)
	// Reclaimed by the recovery sweep; the late worker then finalizes.
	require.NoError(t, b.jobs.Guard.Fail(ctx, b.env.Pool, exec, jobguard.ReclaimedReasonDefault))

	fin, err := b.arts.Finalize(ctx, b.env.Pool, exec, jobguard.FinalizeSpec{})
	require.ErrorIs(t, err, jobguard.ErrJobTerminal)
	require.True(t, fin.Rejected())
	require.Equal(t, map[string]int{file: 1}, b.files.undoneRefs())
	require.False(t, b.assetExists(t, asset))
	require.Equal(t, map[string]string{file: "done", asset: "done"}, b.states(t, exec))
}

func TestFinalize_ConfirmedKeepsArtifactsForever(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.jobs.Insert(t, fixture.Job{Generation: 1})
	exec := jobguard.Execution{JobID: id, Generation: 1}
	file, asset := b.produce(t, exec)

	fin, err := b.arts.Finalize(ctx, b.env.Pool, exec, jobguard.FinalizeSpec{})
	require.NoError(t, err)
	require.True(t, fin.Confirmed())
	require.Equal(t, map[string]string{file: "kept", asset: "kept"}, b.states(t, exec))

	// A replayed finalize of the same execution is rejected (the job is
	// COMPLETED) and must not compensate what the completion kept.
	fin, err = b.arts.Finalize(ctx, b.env.Pool, exec, jobguard.FinalizeSpec{})
	require.ErrorIs(t, err, jobguard.ErrJobTerminal)
	require.True(t, fin.Rejected())
	rep, err := b.arts.Compensate(ctx)
	require.NoError(t, err)
	require.Equal(t, compensate.Report{}, rep)
	require.Empty(t, b.files.undoneRefs())
	require.True(t, b.assetExists(t, asset))
	require.Equal(t, map[string]string{file: "kept", asset: "kept"}, b.states(t, exec))
}

func TestFinalize_NotConfirmedStillKeepsArtifacts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.jobs.Insert(t, fixture.Job{Generation: 1})
	exec := jobguard.Execution{JobID: id, Generation: 1}
	file, asset := b.produce(t, exec)

	fin, err := b.arts.Finalize(ctx, b.env.Pool, exec, jobguard.FinalizeSpec{Updates: []jobguard.Update{
		{Name: "asset", Run: func(context.Context) error { return context.DeadlineExceeded }},
	}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.True(t, fin.Completed())
	require.False(t, fin.Confirmed())
	require.Equal(t, map[string]string{file: "kept", asset: "kept"}, b.states(t, exec),
		"the job is COMPLETED: its outputs stay even though an update failed")
}

func TestFinalize_CompletedOutsideFinalizeIsNotCompensated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.jobs.Insert(t, fixture.Job{Generation: 1})
	exec := jobguard.Execution{JobID: id, Generation: 1}
	file, asset := b.produce(t, exec)
	// Completed by this very execution, but the acknowledgement was lost and
	// the worker finalizes again.
	require.NoError(t, b.jobs.Guard.CompleteIfActive(ctx, b.env.Pool, exec))

	fin, err := b.arts.Finalize(ctx, b.env.Pool, exec, jobguard.FinalizeSpec{})
	require.ErrorIs(t, err, jobguard.ErrJobTerminal)
	require.True(t, fin.Rejected())
	require.Empty(t, b.files.undoneRefs())
	require.Equal(t, map[string]string{file: "pending", asset: "pending"}, b.states(t, exec))

	rep, err := b.arts.Compensate(ctx)
	require.NoError(t, err)
	require.Equal(t, compensate.Report{Kept: 2}, rep, "the sweep keeps artifacts of a completed execution")
	require.Equal(t, map[string]string{file: "kept", asset: "kept"}, b.states(t, exec))
}

func TestCompensate_FailingCompensatorIsRetriedBySweep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.jobs.Insert(t, fixture.Job{Generation: 1})
	exec := jobguard.Execution{JobID: id, Generation: 1}
	file, asset := b.produce(t, exec)
	b.files.failLeft[file] = 2
	require.NoError(t, b.jobs.Guard.Fail(ctx, b.env.Pool, exec, jobguard.ReclaimedReasonDefault))

	_, err := b.arts.Finalize(ctx, b.env.Pool, exec, jobguard.FinalizeSpec{})
	require.ErrorIs(t, err, jobguard.ErrJobTerminal)
	require.Equal(t, map[string]string{file: "rejected", asset: "done"}, b.states(t, exec), "a failed compensation stays owed")

	rep, err := b.arts.Compensate(ctx)
	require.NoError(t, err)
	require.Equal(t, compensate.Report{Failed: 1}, rep)
	rep, err = b.arts.Compensate(ctx)
	require.NoError(t, err)
	require.Equal(t, compensate.Report{Compensated: 1}, rep)
	rep, err = b.arts.Compensate(ctx)
	require.NoError(t, err)
	require.Equal(t, compensate.Report{}, rep, "nothing is compensated twice")

	require.Equal(t, map[string]int{file: 1}, b.files.undoneRefs())
	require.Equal(t, 3, b.files.calls[file])
	var attempts int
	var lastError *string
	require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT attempts, last_error FROM job_artifacts WHERE ref = $1`, file).
		Scan(&attempts, &lastError))
	require.Equal(t, 3, attempts)
	require.Nil(t, lastError)
	require.Equal(t, map[string]string{file: "done", asset: "done"}, b.states(t, exec))
}

func TestCompensate_ConcurrentSweepsCompensateEachArtifactOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const executions = 25
	var assets []string
	for range executions {
		exec := jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
		file, asset := b.produce(t, exec)
		assets = append(assets, asset)
		if len(assets)%5 == 0 {
			b.files.failLeft[file] = 1 // some need a second sweep
		}
		require.NoError(t, b.jobs.Guard.Fail(ctx, b.env.Pool, exec, jobguard.ReclaimedReasonDefault))
	}

	// Two processes' sweepers, each on its own pool, three passes each.
	sweepers := []*compensate.Artifacts{b.arts, b.newArtifacts(t, b.env.Connect(testenv.Config{}))}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total compensate.Report
	)
	for _, s := range sweepers {
		wg.Go(func() {
			for range 3 {
				rep, err := s.Compensate(ctx)
				if !assertNoError(t, err) {
					return
				}
				mu.Lock()
				total.Compensated += rep.Compensated
				total.Rejected += rep.Rejected
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// A failed compensation is retried by the next sweep: one whose first
	// try fell in the last pass left running (the other sweeper had
	// finished its passes) is still owed. Sweep until nothing is, so that
	// what is counted is what the concurrent passes did twice, never how
	// they happened to interleave.
	for range 5 {
		rep, err := b.arts.Compensate(ctx)
		require.NoError(t, err)
		total.Compensated += rep.Compensated
		total.Rejected += rep.Rejected
		if rep == (compensate.Report{}) {
			break
		}
	}

	require.Equal(t, 2*executions, total.Rejected, "each artifact is found owed once")
	require.Equal(t, 2*executions, total.Compensated, "each artifact is compensated once")
	undone := b.files.undoneRefs()
	require.Len(t, undone, executions)
	for ref, n := range undone {
		require.Equal(t, 1, n, "file %s compensated %d times", ref, n)
	}
	for _, a := range assets {
		require.False(t, b.assetExists(t, a))
	}
	var open int
	require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT count(*) FROM job_artifacts WHERE state <> 'done'`).Scan(&open))
	require.Zero(t, open)
}

func TestCompensate_SweepSettlesExecutionsThatNeverFinalized(t *testing.T) {
	t.Parallel()
	for _, v := range []fixture.Variant{fixture.Default, fixture.Prisma, fixture.TextID, fixture.IntID} {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, v)
			ctx := context.Background()
			st := b.jobs.Table.Statuses
			exec := func(gen int64, status string) jobguard.Execution {
				return jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: gen, Status: status}), Generation: gen}
			}
			crashed := exec(1, st.Failed) // reclaimed after its worker crashed
			live := exec(1, st.Processing)
			completed := exec(1, st.Processing)
			superseded := jobguard.Execution{JobID: live.JobID, Generation: 0} // an older run of the live job
			gone := exec(1, st.Processing)
			for _, e := range []jobguard.Execution{crashed, live, completed, superseded, gone} {
				require.NoError(t, b.arts.Record(ctx, b.env.Pool, e, "file", fmt.Sprintf("%s/%d", e.JobID, e.Generation)))
			}
			require.NoError(t, b.jobs.Guard.CompleteIfActive(ctx, b.env.Pool, completed))
			b.env.Exec("DELETE FROM "+b.jobs.Table.QualifiedName()+" WHERE "+quote(b.jobs.Table.IDColumn)+"::text = $1", gone.JobID)

			rep, err := b.arts.Compensate(ctx)
			require.NoError(t, err)
			require.Equal(t, compensate.Report{Kept: 1, Rejected: 2, Compensated: 2}, rep)
			require.Equal(t, "done", only(b.states(t, crashed)))
			require.Equal(t, "done", only(b.states(t, superseded)))
			require.Equal(t, "pending", only(b.states(t, live)), "a live execution is never compensated")
			require.Equal(t, "kept", only(b.states(t, completed)))
			require.Equal(t, "pending", only(b.states(t, gone)), "a job that is gone decides nothing")
		})
	}
}

func TestRun_SweepsUntilContextEnds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	arts, err := compensate.New(context.Background(), compensate.Config{
		Guard: b.jobs.Guard, DB: b.env.Pool, Interval: 10 * time.Millisecond,
		Compensators: map[string]compensate.Func{"file": b.files.compensate},
	})
	require.NoError(t, err)
	exec := jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: 1, Status: "FAILED"}), Generation: 1}
	require.NoError(t, arts.Record(context.Background(), b.env.Pool, exec, "file", "f"))
	b.files.failLeft["f"] = 2

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- arts.Run(ctx) }()
	require.Eventually(t, func() bool { return b.files.undoneRefs()["f"] == 1 }, testenv.Patience, 5*time.Millisecond)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

func TestRecord_RowArtifactRollsBackWithItsRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	exec := jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
	tx, err := b.env.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO assets (job_id, generation) VALUES ($1, 1)`, exec.JobID)
	require.NoError(t, err)
	require.NoError(t, b.arts.Record(ctx, tx, exec, "asset_row", "1"))
	require.NoError(t, tx.Rollback(ctx))
	require.Empty(t, b.states(t, exec))

	require.NoError(t, b.arts.Record(ctx, b.env.Pool, exec, "file", "a"))
	require.NoError(t, b.arts.Record(ctx, b.env.Pool, exec, "file", "a"), "recording twice is a no-op")
	require.Equal(t, map[string]string{"a": "pending"}, b.states(t, exec))
}

func TestRecord_UUIDInAnyCaseIsOneJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.jobs.Insert(t, fixture.Job{Generation: 1})
	upper := jobguard.Execution{JobID: strings.ToUpper(id), Generation: 1}
	require.NoError(t, b.arts.Record(ctx, b.env.Pool, upper, "file", "a"))
	require.NoError(t, b.jobs.Guard.Fail(ctx, b.env.Pool, upper, jobguard.ReclaimedReasonDefault))

	rep, err := b.arts.Compensate(ctx)
	require.NoError(t, err)
	require.Equal(t, compensate.Report{Rejected: 1, Compensated: 1}, rep)
	require.Equal(t, map[string]string{"a": "done"}, b.states(t, jobguard.Execution{JobID: id, Generation: 1}))

	err = b.arts.Record(ctx, b.env.Pool, jobguard.Execution{JobID: "not-a-uuid", Generation: 1}, "file", "b")
	require.Error(t, err, "an id the jobs table cannot hold is refused")
}

func TestRecord_RefusesKindWithoutCompensator(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exec := jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
	err := b.arts.Record(context.Background(), b.env.Pool, exec, "thumbnail", "x")
	require.ErrorContains(t, err, `no compensator for kind "thumbnail"`)
	require.Empty(t, b.states(t, exec))
}

func TestNew_ValidatesConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	unfenced := fixture.Create(t, b.env, fixture.NoGeneration)
	// A table made by the first migration file alone.
	first, err := fs.ReadFile(compensate.MigrationFiles, "0001_job_artifacts.sql")
	require.NoError(t, err)
	b.env.Exec(strings.ReplaceAll(string(first), "job_artifacts", "first_artifacts"))
	// And one made by the first two, before artifacts named their jobs table.
	second, err := fs.ReadFile(compensate.MigrationFiles, "0002_job_artifacts_recheck.sql")
	require.NoError(t, err)
	b.env.Exec(strings.ReplaceAll(string(first)+string(second), "job_artifacts", "second_artifacts"))
	fns := map[string]compensate.Func{"file": b.files.compensate}
	for want, cfg := range map[string]compensate.Config{
		"Guard is nil":         {DB: b.env.Pool, Compensators: fns},
		"no generation column": {Guard: unfenced.Guard, DB: b.env.Pool, Compensators: fns},
		"DB is nil":            {Guard: b.jobs.Guard, Compensators: fns},
		"Compensators":         {Guard: b.jobs.Guard, DB: b.env.Pool},
		"Interval":             {Guard: b.jobs.Guard, DB: b.env.Pool, Compensators: fns, Interval: -1},
		"MaxPerSweep":          {Guard: b.jobs.Guard, DB: b.env.Pool, Compensators: fns, MaxPerSweep: -1},
		"RecheckAfter":         {Guard: b.jobs.Guard, DB: b.env.Pool, Compensators: fns, RecheckAfter: -1},
		"no column recheck_at": {Guard: b.jobs.Guard, DB: b.env.Pool, Compensators: fns, Table: "first_artifacts"},
		"no column jobs_table": {Guard: b.jobs.Guard, DB: b.env.Pool, Compensators: fns, Table: "second_artifacts"},
		"Table":                {Guard: b.jobs.Guard, DB: b.env.Pool, Compensators: fns, Table: strings.Repeat("x", 64)},
		"does not exist":       {Guard: b.jobs.Guard, DB: b.env.Pool, Compensators: fns, Table: "artifacts_elsewhere"},
	} {
		_, err := compensate.New(context.Background(), cfg)
		require.ErrorContains(t, err, want)
	}
}

func only(m map[string]string) string {
	if len(m) != 1 {
		return ""
	}
	for _, v := range m {
		return v
	}
	return ""
}

// assertNoError reports err from a goroutine, where require must not be used.
func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}

func TestFinalize_CallerTransactionKeepsAndCompensatesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	exec := jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
	file, asset := b.produce(t, exec)
	tx, err := b.env.Pool.Begin(ctx)
	require.NoError(t, err)

	fin, err := b.arts.Finalize(ctx, tx, exec, jobguard.FinalizeSpec{})
	require.NoError(t, tx.Rollback(ctx))

	require.False(t, fin.Confirmed(), "confirmed, and then the caller rolled back")
	require.False(t, fin.Rejected(), "nothing was decided")
	require.ErrorIs(t, err, jobguard.ErrInTransaction)
	require.Equal(t, map[string]string{file: "pending", asset: "pending"}, b.states(t, exec))
	require.Empty(t, b.files.undoneRefs())
	require.True(t, b.assetExists(t, asset))
	require.Equal(t, "PROCESSING", b.jobs.Read(t, exec.JobID).Status)
}
