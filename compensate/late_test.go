package compensate_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
)

// objectStore stands in for an object store with a real directory: an
// upload writes a file, the compensator removes it (a missing file is
// done, so the compensator is idempotent, as the package requires).
type objectStore struct {
	dir string
	// gate, when set, holds every removal until it is closed, with
	// removing closed as the first removal starts.
	gate, removing chan struct{}
	started        sync.Once
}

func (s *objectStore) path(ref string) string { return filepath.Join(s.dir, filepath.FromSlash(ref)) }

// upload writes the object, as the worker's upload (or one it left in
// flight) does, whatever the database says.
func (s *objectStore) upload(t *testing.T, ref, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(s.path(ref)), 0o755))
	require.NoError(t, os.WriteFile(s.path(ref), []byte(content), 0o644))
}

// read returns the object's content, or "" when there is none.
func (s *objectStore) read(t *testing.T, ref string) string {
	t.Helper()
	b, err := os.ReadFile(s.path(ref))
	if errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	require.NoError(t, err)
	return string(b)
}

func (s *objectStore) remove(ctx context.Context, _ pgx.Tx, a compensate.Artifact) error {
	if s.gate != nil {
		s.started.Do(func() { close(s.removing) })
		select {
		case <-s.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := os.Remove(s.path(a.Ref)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

type lateBundle struct {
	*bundle
	store *objectStore
	arts  *compensate.Artifacts
}

// setupLate is the documented setup with a real object store: objects are
// recorded before they are uploaded, workers finalize through Artifacts,
// and the sweep runs beside the reclaimer.
func setupLate(t *testing.T) *lateBundle {
	t.Helper()
	b := setup(t)
	lb := &lateBundle{bundle: b, store: &objectStore{dir: t.TempDir()}}
	arts, err := compensate.New(context.Background(), compensate.Config{
		Guard: b.jobs.Guard, DB: b.env.Pool,
		Compensators: map[string]compensate.Func{"object": lb.store.remove},
	})
	require.NoError(t, err)
	lb.arts = arts
	return lb
}

// sweepLater is the sweep that keeps running beside the reclaimer, an hour
// on by the database's clock, which is the one rechecks are due by.
func (lb *lateBundle) sweepLater(t *testing.T) {
	t.Helper()
	lb.env.Exec(`UPDATE job_artifacts SET recheck_at = recheck_at - interval '1 hour'`)
	_, err := lb.arts.Compensate(context.Background())
	require.NoError(t, err)
}

func TestLateUpload_ObjectOfRejectedExecutionIsGoneWhateverTheOrder(t *testing.T) {
	t.Parallel()
	// The execution records the object, the job is reclaimed while its
	// upload is on its way, and then these happen in every order: the sweep
	// beside the reclaimer, the upload landing, the execution's (rejected)
	// finalize. "crash" is a worker that dies before it finalizes.
	orders := [][]string{
		{"sweep", "upload", "finalize"},
		{"upload", "sweep", "finalize"},
		{"upload", "finalize", "sweep"},
		{"sweep", "finalize", "upload"},
		{"finalize", "sweep", "upload"},
		{"finalize", "upload", "sweep"},
		{"sweep", "upload", "crash"},
	}
	for _, order := range orders {
		t.Run(strings.Join(order, "-"), func(t *testing.T) {
			t.Parallel()
			lb := setupLate(t)
			ctx := context.Background()
			exec := jobguard.Execution{JobID: lb.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
			ref := "videos/" + exec.JobID + "/g1.mp4"
			require.NoError(t, lb.arts.Record(ctx, lb.env.Pool, exec, "object", ref))
			require.NoError(t, lb.jobs.Guard.Fail(ctx, lb.env.Pool, exec, jobguard.ReclaimedReasonDefault))

			for _, step := range order {
				switch step {
				case "sweep":
					_, err := lb.arts.Compensate(ctx)
					require.NoError(t, err)
				case "upload":
					lb.store.upload(t, ref, "late")
				case "finalize":
					fin, err := lb.arts.Finalize(ctx, lb.env.Pool, exec, jobguard.FinalizeSpec{})
					require.ErrorIs(t, err, jobguard.ErrJobTerminal)
					require.True(t, fin.Rejected())
				}
			}
			lb.sweepLater(t)

			require.Empty(t, lb.store.read(t, ref), "the rejected execution's object outlived every compensation")
			require.Equal(t, map[string]string{ref: "done"}, lb.states(t, exec))
		})
	}
}

func TestRecord_CompensatedArtifactTellsTheExecutionItLost(t *testing.T) {
	t.Parallel()
	lb := setupLate(t)
	ctx := context.Background()
	exec := jobguard.Execution{JobID: lb.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
	ref := "videos/" + exec.JobID + "/g1.mp4"
	require.NoError(t, lb.arts.Record(ctx, lb.env.Pool, exec, "object", ref))
	require.NoError(t, lb.jobs.Guard.Fail(ctx, lb.env.Pool, exec, jobguard.ReclaimedReasonDefault))
	_, err := lb.arts.Compensate(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]string{ref: "done"}, lb.states(t, exec))

	// The execution, still running, records the object again before a
	// retried upload.
	err = lb.arts.Record(ctx, lb.env.Pool, exec, "object", ref)
	require.ErrorIs(t, err, compensate.ErrCompensated, "the execution must learn that it lost its job before it uploads")
	require.True(t, jobguard.IsPermanent(err))
	require.Equal(t, map[string]string{ref: "rejected"}, lb.states(t, exec), "owed again")

	// It uploads anyway: the next sweep removes it.
	lb.store.upload(t, ref, "late")
	rep, err := lb.arts.Compensate(ctx)
	require.NoError(t, err)
	require.Equal(t, compensate.Report{Compensated: 1}, rep)
	require.Empty(t, lb.store.read(t, ref))

	// A live execution's second record of the same artifact is a no-op.
	live := jobguard.Execution{JobID: lb.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
	require.NoError(t, lb.arts.Record(ctx, lb.env.Pool, live, "object", "live.mp4"))
	require.NoError(t, lb.arts.Record(ctx, lb.env.Pool, live, "object", "live.mp4"))
	require.Equal(t, map[string]string{"live.mp4": "pending"}, lb.states(t, live))
}

// sharedRef sets up a job whose first execution was reclaimed and whose
// second (after an operator's retry) records and uploads the same ref.
func sharedRef(t *testing.T, lb *lateBundle) (stale, current jobguard.Execution, ref string) {
	t.Helper()
	ctx := context.Background()
	id := lb.jobs.Insert(t, fixture.Job{Generation: 1})
	stale = jobguard.Execution{JobID: id, Generation: 1}
	ref = "videos/" + id + ".mp4" // one path per job, not per execution
	require.NoError(t, lb.arts.Record(ctx, lb.env.Pool, stale, "object", ref))
	lb.store.upload(t, ref, "stale")
	require.NoError(t, lb.jobs.Guard.Fail(ctx, lb.env.Pool, stale, jobguard.ReclaimedReasonDefault))
	gen, err := lb.jobs.Guard.Retry(ctx, lb.env.Pool, id)
	require.NoError(t, err)
	current = jobguard.Execution{JobID: id, Generation: gen}
	require.NoError(t, lb.arts.Record(ctx, lb.env.Pool, current, "object", ref))
	lb.store.upload(t, ref, "current")
	return stale, current, ref
}

func TestSharedRef_RejectedOldExecutionSparesTheCompletedOutput(t *testing.T) {
	t.Parallel()
	for _, via := range []string{"finalize", "sweep"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			lb := setupLate(t)
			ctx := context.Background()
			stale, current, ref := sharedRef(t, lb)
			fin, err := lb.arts.Finalize(ctx, lb.env.Pool, current, jobguard.FinalizeSpec{})
			require.NoError(t, err)
			require.True(t, fin.Confirmed())

			// The stale execution's artifact is compensated: by its own
			// rejected finalize, or by the sweep after it died.
			var rep compensate.Report
			if via == "finalize" {
				_, err := lb.arts.Finalize(ctx, lb.env.Pool, stale, jobguard.FinalizeSpec{})
				require.ErrorIs(t, err, jobguard.ErrJobTerminal)
			} else {
				rep, err = lb.arts.Compensate(ctx)
				require.NoError(t, err)
				require.Equal(t, compensate.Report{Rejected: 1, Spared: 1}, rep)
			}
			lb.sweepLater(t)

			require.Equal(t, "current", lb.store.read(t, ref), "compensating the stale execution deleted the completed job's output")
			require.Equal(t, map[string]string{ref: "done"}, lb.states(t, stale))
			require.Equal(t, map[string]string{ref: "kept"}, lb.states(t, current))
		})
	}
}

func TestSharedRef_LiveExecutionKeepsItUntilItIsRejectedItself(t *testing.T) {
	t.Parallel()
	lb := setupLate(t)
	ctx := context.Background()
	stale, current, ref := sharedRef(t, lb)

	// The current execution is still running when the stale one is
	// compensated.
	rep, err := lb.arts.Compensate(ctx)
	require.NoError(t, err)
	require.Equal(t, compensate.Report{Rejected: 1, Spared: 1}, rep)
	require.Equal(t, map[string]string{ref: "done"}, lb.states(t, stale))
	require.Equal(t, "current", lb.store.read(t, ref), "the live execution's upload was deleted under it")

	// Then it is reclaimed too: now nobody holds the ref, and it goes.
	require.NoError(t, lb.jobs.Guard.Fail(ctx, lb.env.Pool, current, jobguard.ReclaimedReasonDefault))
	_, err = lb.arts.Finalize(ctx, lb.env.Pool, current, jobguard.FinalizeSpec{})
	require.ErrorIs(t, err, jobguard.ErrJobTerminal)
	require.Empty(t, lb.store.read(t, ref))
	require.Equal(t, map[string]string{ref: "done"}, lb.states(t, current))
}

func TestSharedRef_RecordWaitsForACompensationOfTheSameRef(t *testing.T) {
	t.Parallel()
	lb := setupLate(t)
	ctx := context.Background()
	id := lb.jobs.Insert(t, fixture.Job{Generation: 1})
	stale := jobguard.Execution{JobID: id, Generation: 1}
	ref := "videos/" + id + ".mp4"
	require.NoError(t, lb.arts.Record(ctx, lb.env.Pool, stale, "object", ref))
	lb.store.upload(t, ref, "stale")
	require.NoError(t, lb.jobs.Guard.Fail(ctx, lb.env.Pool, stale, jobguard.ReclaimedReasonDefault))
	gen, err := lb.jobs.Guard.Retry(ctx, lb.env.Pool, id)
	require.NoError(t, err)
	current := jobguard.Execution{JobID: id, Generation: gen}

	// The sweep, on its own connection, is removing the stale object when
	// the current execution, on another, records the same ref to upload it.
	lb.store.gate, lb.store.removing = make(chan struct{}), make(chan struct{})
	swept := make(chan error, 1)
	go func() {
		_, err := lb.arts.Compensate(ctx)
		swept <- err
	}()
	<-lb.store.removing
	recorded := make(chan error, 1)
	go func() { recorded <- lb.arts.Record(ctx, lb.env.Pool, current, "object", ref) }()
	select {
	case err := <-recorded:
		// Recorded while the removal is still to come: the upload that
		// follows would be deleted by it. Let the sweep finish to show it.
		require.NoError(t, err)
		lb.store.upload(t, ref, "current")
		close(lb.store.gate)
		require.NoError(t, <-swept)
		require.Equal(t, "current", lb.store.read(t, ref), "the sweep deleted the upload of the execution that recorded it during the removal")
	case <-time.After(time.Second):
		// Record waits for the removal to commit; the upload follows it.
		close(lb.store.gate)
		require.NoError(t, <-swept)
		require.NoError(t, <-recorded)
		lb.store.upload(t, ref, "current")
	}
	fin, err := lb.arts.Finalize(ctx, lb.env.Pool, current, jobguard.FinalizeSpec{})
	require.NoError(t, err)
	require.True(t, fin.Confirmed())
	lb.sweepLater(t)
	require.Equal(t, "current", lb.store.read(t, ref))
	require.Equal(t, map[string]string{ref: "kept"}, lb.states(t, current))
}

func TestSharedRef_RecordInsideTransactionHoldsTheRefUntilItEnds(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		name := map[bool]string{true: "commit", false: "rollback"}[commit]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			lb := setupLate(t)
			ctx := context.Background()
			id := lb.jobs.Insert(t, fixture.Job{Generation: 1})
			stale := jobguard.Execution{JobID: id, Generation: 1}
			ref := "assets/" + id
			require.NoError(t, lb.arts.Record(ctx, lb.env.Pool, stale, "object", ref))
			lb.store.upload(t, ref, "stale")
			require.NoError(t, lb.jobs.Guard.Fail(ctx, lb.env.Pool, stale, jobguard.ReclaimedReasonDefault))
			gen, err := lb.jobs.Guard.Retry(ctx, lb.env.Pool, id)
			require.NoError(t, err)
			current := jobguard.Execution{JobID: id, Generation: gen}

			// The current execution records the ref in its transaction,
			// which is still open when the sweep comes by.
			tx, err := lb.env.Pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			require.NoError(t, lb.arts.Record(ctx, tx, current, "object", ref))
			rep, err := lb.arts.Compensate(ctx)
			require.NoError(t, err)
			require.Equal(t, compensate.Report{Rejected: 1}, rep, "neither undone nor spared while the record is undecided")
			require.Equal(t, map[string]string{ref: "rejected"}, lb.states(t, stale))

			if commit {
				require.NoError(t, tx.Commit(ctx))
				lb.store.upload(t, ref, "current")
			} else {
				require.NoError(t, tx.Rollback(ctx))
			}
			rep, err = lb.arts.Compensate(ctx)
			require.NoError(t, err)
			if commit {
				require.Equal(t, compensate.Report{Spared: 1}, rep)
				require.Equal(t, "current", lb.store.read(t, ref))
			} else {
				require.Equal(t, compensate.Report{Compensated: 1}, rep)
				require.Empty(t, lb.store.read(t, ref))
			}
			require.Equal(t, map[string]string{ref: "done"}, lb.states(t, stale))
		})
	}
}

// Two processes name the one artifacts table two ways: one through the
// search_path, the other with its schema. They still take one lock per
// ref: a sweep of the second leaves alone a ref the first is recording in
// an open transaction.
func TestSharedRef_TableSpelledTwoWaysIsOneLock(t *testing.T) {
	t.Parallel()
	lb := setupLate(t)
	ctx := context.Background()
	other, err := compensate.New(ctx, compensate.Config{
		Guard: lb.jobs.Guard, DB: lb.env.Pool, Schema: lb.env.Schema,
		Compensators: map[string]compensate.Func{"object": lb.store.remove},
	})
	require.NoError(t, err)
	id := lb.jobs.Insert(t, fixture.Job{Generation: 1})
	stale := jobguard.Execution{JobID: id, Generation: 1}
	ref := "assets/" + id
	require.NoError(t, lb.arts.Record(ctx, lb.env.Pool, stale, "object", ref))
	lb.store.upload(t, ref, "stale")
	require.NoError(t, lb.jobs.Guard.Fail(ctx, lb.env.Pool, stale, jobguard.ReclaimedReasonDefault))
	gen, err := lb.jobs.Guard.Retry(ctx, lb.env.Pool, id)
	require.NoError(t, err)

	tx, err := lb.env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(t, lb.arts.Record(ctx, tx, jobguard.Execution{JobID: id, Generation: gen}, "object", ref))
	rep, err := other.Compensate(ctx)
	require.NoError(t, err)
	require.Equal(t, compensate.Report{Rejected: 1}, rep, "the other spelling saw the ref held")
	require.Equal(t, "stale", lb.store.read(t, ref), "nothing removed under the recording transaction")
}
