package compensate_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/panicky"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
)

// panickingCompensator runs fn, but for the ref bad while broken is set it
// first deletes every asset row through tx and then panics: a compensator
// with a bug, whose half-done write must not commit.
func panickingCompensator(fn compensate.Func, bad string, broken *atomic.Bool) compensate.Func {
	return func(ctx context.Context, tx pgx.Tx, a compensate.Artifact) error {
		if a.Ref == bad && broken.Load() {
			if _, err := tx.Exec(ctx, `DELETE FROM assets`); err != nil {
				return err
			}
			panic("boom")
		}
		return fn(ctx, tx, a)
	}
}

// lostExecution inserts a job reclaimed from generation 1 and records a
// file artifact ref for that execution.
func (b *bundle) lostExecution(t *testing.T, ref string) jobguard.Execution {
	t.Helper()
	exec := jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
	require.NoError(t, b.arts.Record(context.Background(), b.env.Pool, exec, "file", ref))
	require.NoError(t, b.jobs.Guard.Fail(context.Background(), b.env.Pool, exec, jobguard.ReclaimedReasonDefault))
	return exec
}

// A compensator that panics fails its artifact as an error would: what it
// wrote rolls back, the artifact stays owed with the cause, the failure is
// counted and logged with its stack, the other artifact of the sweep is
// compensated, and the next sweep tries it again.
func TestCompensate_CompensatorThatPanicsLeavesItsArtifactOwed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.env.Exec(`INSERT INTO assets (job_id, generation) VALUES ('someone else', 1)`)
	bad := b.lostExecution(t, "bad.mp4")
	good := b.lostExecution(t, "good.mp4")
	var broken atomic.Bool
	broken.Store(true)
	logs := &testenv.Logs{}
	arts, err := compensate.New(ctx, compensate.Config{
		Guard: b.jobs.Guard, DB: b.env.Pool, Logger: logs.Logger(),
		Compensators: map[string]compensate.Func{"file": panickingCompensator(b.files.compensate, "bad.mp4", &broken)},
	})
	require.NoError(t, err)

	var rep compensate.Report
	require.NotPanics(t, func() { rep, err = arts.Compensate(ctx) })
	require.NoError(t, err)
	require.Equal(t, 1, rep.Compensated)
	require.Equal(t, 1, rep.Failed)
	require.Equal(t, map[string]string{"good.mp4": "done"}, b.states(t, good))
	require.Equal(t, map[string]string{"bad.mp4": "rejected"}, b.states(t, bad), "still owed")
	var lastError string
	require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT last_error FROM job_artifacts WHERE ref = 'bad.mp4'`).Scan(&lastError))
	require.Contains(t, lastError, "panic: boom")
	var assets int
	require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT count(*) FROM assets`).Scan(&assets))
	require.Equal(t, 1, assets, "the panicking compensator's write rolled back")
	out := logs.String()
	require.Contains(t, out, `level=WARN msg="compensate: compensator failed; retried by the next sweep"`)
	require.Contains(t, out, `panickingCompensator`, "the stack is logged")

	// The next sweep tries it again; fixed, it is compensated.
	rep, err = arts.Compensate(ctx)
	require.NoError(t, err)
	require.Equal(t, compensate.Report{Failed: 1}, rep)
	broken.Store(false)
	rep, err = arts.Compensate(ctx)
	require.NoError(t, err)
	require.Equal(t, compensate.Report{Compensated: 1}, rep)
	require.Equal(t, map[string]string{"bad.mp4": "done"}, b.states(t, bad))
}

// In the worker, a rejected Finalize whose compensator panics returns its
// own error, not a panic, and leaves the artifact owed to the sweep.
func TestFinalize_RejectedCompletionWithACompensatorThatPanicsLeavesItOwed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	exec := jobguard.Execution{JobID: b.jobs.Insert(t, fixture.Job{Generation: 1}), Generation: 1}
	var broken atomic.Bool
	broken.Store(true)
	arts, err := compensate.New(ctx, compensate.Config{
		Guard: b.jobs.Guard, DB: b.env.Pool, Logger: (&testenv.Logs{}).Logger(),
		Compensators: map[string]compensate.Func{"file": panickingCompensator(b.files.compensate, "bad.mp4", &broken)},
	})
	require.NoError(t, err)
	require.NoError(t, arts.Record(ctx, b.env.Pool, exec, "file", "bad.mp4"))
	require.NoError(t, b.jobs.Guard.Fail(ctx, b.env.Pool, exec, jobguard.ReclaimedReasonDefault))

	var fin jobguard.Finalized
	require.NotPanics(t, func() { fin, err = arts.Finalize(ctx, b.env.Pool, exec, jobguard.FinalizeSpec{}) })
	require.ErrorIs(t, err, jobguard.ErrJobTerminal)
	require.True(t, fin.Rejected())
	require.Equal(t, map[string]string{"bad.mp4": "rejected"}, b.states(t, exec))
}

// A logger and a meter that panic cannot stop Run: artifacts are still
// compensated, pass after pass, and Run returns when its context ends.
func TestRun_PanickingLoggerAndMeterDoNotStopTheSweeps(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var sw panicky.Switch
	arts, err := compensate.New(context.Background(), compensate.Config{
		Guard: b.jobs.Guard, DB: b.env.Pool, Interval: 10 * time.Millisecond,
		Logger: sw.Logger(), MeterProvider: sw.MeterProvider(),
		Compensators: map[string]compensate.Func{"file": b.files.compensate},
	})
	require.NoError(t, err)
	sw.Arm()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- arts.Run(ctx) }()
	for _, ref := range []string{"first.mp4", "second.mp4"} { // a later pass runs too
		b.lostExecution(t, ref)
		require.Eventually(t, func() bool { return b.files.undoneRefs()[ref] >= 1 }, testenv.Patience, 5*time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// A compensator that fails, by a panic or an error, or even returns, while
// its query's rows are still open leaves its transaction on a busy
// connection, where not even the rollback to its savepoint can run. Its artifact stays owed with
// the cause recorded, and the sweep goes on to compensate the next one.
func TestCompensate_CompensatorThatFailsWithItsRowsOpenLeavesOnlyItsArtifactOwed(t *testing.T) {
	t.Parallel()
	for how, cause := range map[string]string{"panics": "panic: boom", "fails": "half way", "returns": "conn busy"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			bad := b.lostExecution(t, "bad.mp4")
			good := b.lostExecution(t, "good.mp4")
			openRows := func(ctx context.Context, tx pgx.Tx, a compensate.Artifact) error {
				if a.Ref != "bad.mp4" {
					return b.files.compensate(ctx, tx, a)
				}
				rows, err := tx.Query(ctx, `SELECT generate_series(1, 100000)`)
				if err != nil {
					return err
				}
				_ = rows // left open
				switch how {
				case "panics":
					panic("boom")
				case "fails":
					return errors.New("gave up half way through its rows")
				}
				return nil
			}
			logs := &testenv.Logs{}
			arts, err := compensate.New(ctx, compensate.Config{
				Guard: b.jobs.Guard, DB: b.env.Pool, Logger: logs.Logger(),
				Compensators: map[string]compensate.Func{"file": openRows},
			})
			require.NoError(t, err)

			rep, err := arts.Compensate(ctx)
			require.NoError(t, err, "logs:\n%s", logs)
			require.Equal(t, 1, rep.Compensated)
			require.Equal(t, 1, rep.Failed)
			require.Equal(t, map[string]string{"good.mp4": "done"}, b.states(t, good))
			require.Equal(t, map[string]string{"bad.mp4": "rejected"}, b.states(t, bad), "still owed")
			var lastError string
			var attempts int
			require.NoError(t, b.env.Pool.QueryRow(ctx,
				`SELECT last_error, attempts FROM job_artifacts WHERE ref = 'bad.mp4'`).Scan(&lastError, &attempts))
			require.Contains(t, lastError, cause)
			require.Equal(t, 1, attempts)
		})
	}
}

// A logger that panics cannot stall the sweeps at an artifact whose
// compensator keeps failing: the artifacts after it are still compensated.
func TestCompensate_PanickingLoggerDoesNotStallTheArtifactsAfterAFailingOne(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.lostExecution(t, "failing.mp4")
	good := b.lostExecution(t, "good.mp4")
	b.files.failLeft["failing.mp4"] = 1 << 30
	for name, cfg := range map[string]func(*panicky.Switch) compensate.Config{
		"logger": func(sw *panicky.Switch) compensate.Config { return compensate.Config{Logger: sw.Logger()} },
		"meter": func(sw *panicky.Switch) compensate.Config {
			return compensate.Config{MeterProvider: sw.MeterProvider()}
		},
	} {
		t.Run(name, func(t *testing.T) {
			var sw panicky.Switch
			c := cfg(&sw)
			c.Guard, c.DB = b.jobs.Guard, b.env.Pool
			c.Compensators = map[string]compensate.Func{"file": b.files.compensate}
			arts, err := compensate.New(ctx, c)
			require.NoError(t, err)
			sw.Arm()
			var rep compensate.Report
			require.NotPanics(t, func() { rep, err = arts.Compensate(ctx) })
			require.NoError(t, err)
			require.Equal(t, 1, rep.Failed, "%+v", rep)
		})
	}
	require.Equal(t, map[string]string{"good.mp4": "done"}, b.states(t, good))
}
