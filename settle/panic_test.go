package settle_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/panicky"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// panickingHandler runs h, except for the job bad while broken is set,
// where it panics: a handler with a bug for one record's arguments.
func panickingHandler(h settle.Handler, bad string, broken *atomic.Bool) settle.Handler {
	return func(ctx context.Context, exec jobguard.Execution, args json.RawMessage) error {
		if exec.JobID == bad && broken.Load() {
			panic("boom")
		}
		return h(ctx, exec, args)
	}
}

// panickingIncrement is panickingHandler for an increment.
func panickingIncrement(inc settle.Increment, bad string, broken *atomic.Bool) settle.Increment {
	return func(ctx context.Context, tx pgx.Tx, exec jobguard.Execution, e usage.Entry) error {
		if exec.JobID == bad && broken.Load() {
			panic("boom")
		}
		return inc(ctx, tx, exec, e)
	}
}

// patient is quick with a backoff no test waits out: a record that failed
// is not due again within the test unless the test makes it due.
func patient(cfg settle.Config) settle.Config {
	cfg = quick(cfg)
	cfg.BackoffMin, cfg.BackoffMax = time.Hour, time.Hour
	return cfg
}

// due makes exec's record due now.
func (b *bundle) due(exec jobguard.Execution) {
	b.env.Exec(`UPDATE job_settlements SET next_attempt_at = now() WHERE job_id = $1`, exec.JobID)
}

// A handler that panics on one record fails that record's attempt, like an
// error: counted, logged with its stack, retried after its backoff (not at
// once, not in a loop). The other record of the same sweep settles, the
// sweep returns, and the next one runs.
func TestSweep_HandlerThatPanicsFailsItsRecordAloneAndTheSweepsGoOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	good := b.pendingRecord(t, b.s, 1000)
	bad := b.pendingRecord(t, b.s, 2000)
	var broken atomic.Bool
	broken.Store(true)
	hs := handlers(b.env.Pool, b.faults, nil)
	hs["content"] = panickingHandler(hs["content"], bad.JobID, &broken)
	logs := &testenv.Logs{}
	s := b.settler(t, patient(settle.Config{Handlers: hs, Logger: logs.Logger()}))

	var rep settle.Report
	var err error
	require.NotPanics(t, func() { rep, err = s.Sweep(ctx) })
	require.NoError(t, err)
	require.Equal(t, settle.Report{Taken: 2, Settled: 1, Retrying: 1, Updates: 1, Accrued: 1}, rep)
	rec, _ := b.record(t, good)
	require.Equal(t, "confirmed", rec.State)
	rec, _ = b.record(t, bad)
	require.Equal(t, "pending", rec.State)
	require.Equal(t, 1, rec.Attempts)
	require.Contains(t, rec.Error, "panic: boom")
	require.Zero(t, b.billed(t, bad).LedgerRows)
	out := logs.String()
	require.Contains(t, out, `level=WARN msg="settle: sweep" taken=2 settled=1 raced=0 retrying=1`)
	require.Contains(t, out, `panic=boom`)
	require.Contains(t, out, `panickingHandler`, "the stack is logged")

	// Not retried in a loop: the record waits for its backoff.
	rep, err = s.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Taken)

	// Once due, with the bug fixed, the next sweep settles it.
	broken.Store(false)
	b.due(bad)
	rep, err = s.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Settled)
	require.Equal(t, billed{LedgerRows: 1, AccountMS: 3000, VideoReady: true, Published: true}, b.billed(t, bad))
}

// An increment that panics fails its record's billing: the billing
// transaction rolls back (no ledger row, nothing added), and the record
// stays pending for its backoff, while the other record is billed.
func TestSweep_IncrementThatPanicsFailsItsRecordAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	good := b.pendingRecord(t, b.s, 1000)
	bad := b.pendingRecord(t, b.s, 2000)
	var broken atomic.Bool
	broken.Store(true)
	incs := increments(nil)
	incs["video_ms"] = panickingIncrement(incs["video_ms"], bad.JobID, &broken)
	logs := &testenv.Logs{}
	s := b.settler(t, patient(settle.Config{Increments: incs, Logger: logs.Logger()}))

	var rep settle.Report
	var err error
	require.NotPanics(t, func() { rep, err = s.Sweep(ctx) })
	require.NoError(t, err)
	require.Equal(t, settle.Report{Taken: 2, Settled: 1, Retrying: 1, Updates: 2, Accrued: 1}, rep)
	rec, _ := b.record(t, good)
	require.Equal(t, "confirmed", rec.State)
	rec, _ = b.record(t, bad)
	require.Equal(t, "pending", rec.State)
	require.Contains(t, rec.Error, "panic: boom")
	require.Zero(t, b.billed(t, bad).LedgerRows, "the billing rolled back")
	require.Equal(t, int64(1000), b.billed(t, good).AccountMS, "only the good record was billed")
	require.Contains(t, logs.String(), `panickingIncrement`, "the stack is logged")

	broken.Store(false)
	b.due(bad)
	rep, err = s.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Settled)
	require.Equal(t, int64(3000), b.billed(t, bad).AccountMS)
}

// A handler that ignores its context cannot hold the sweep: it is
// abandoned at UpdateTimeout (and a moment), its record fails its attempt,
// and the sweep settles the others and returns. UpdateTimeout is quick's
// few seconds, which the other record's updates meet on a loaded machine
// too: shorter, they time out as well, and nothing settles.
func TestSweep_HandlerIgnoringItsContextIsAbandonedAtUpdateTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	good := b.pendingRecord(t, b.s, 1000)
	bad := b.pendingRecord(t, b.s, 2000)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	hs := handlers(b.env.Pool, b.faults, nil)
	content := hs["content"]
	hs["content"] = func(ctx context.Context, exec jobguard.Execution, args json.RawMessage) error {
		if exec.JobID == bad.JobID {
			<-release
			return nil
		}
		return content(ctx, exec, args)
	}
	cfg := patient(settle.Config{Handlers: hs})
	s := b.settler(t, cfg)

	type result struct {
		rep settle.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := s.Sweep(ctx)
		done <- result{rep, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-time.After(testenv.Patience):
		t.Fatalf("the sweep still waits for a handler that ignores its context, %v after its %v UpdateTimeout", testenv.Patience, cfg.UpdateTimeout)
	}
	require.NoError(t, res.err)
	require.Equal(t, settle.Report{Taken: 2, Settled: 1, Retrying: 1, Updates: 1, Accrued: 1}, res.rep)
	rec, _ := b.record(t, good)
	require.Equal(t, "confirmed", rec.State)
	rec, _ = b.record(t, bad)
	require.Equal(t, "pending", rec.State)
	require.Contains(t, rec.Error, "abandoned")
	require.Contains(t, rec.Error, "context deadline exceeded")
}

// In the worker, a handler that panics does not panic the worker: Finalize
// returns ErrPending with the *PanicError, the completion stands, the
// record stays pending with the cause, and the sweep settles it.
func TestFinalize_HandlerThatPanicsLeavesThePendingRecordToTheSweep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	exec, spec := b.video(t, 5000)
	var broken atomic.Bool
	broken.Store(true)
	hs := handlers(b.env.Pool, b.faults, nil)
	hs["content"] = panickingHandler(hs["content"], exec.JobID, &broken)
	s := b.settler(t, quick(settle.Config{Handlers: hs}))

	var res settle.Result
	var err error
	require.NotPanics(t, func() { res, err = s.Finalize(ctx, b.env.Pool, exec, spec) })
	require.ErrorIs(t, err, settle.ErrPending)
	var pe *jobguard.PanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "boom", pe.Value)
	require.Contains(t, string(pe.Stack), "panickingHandler")
	require.True(t, res.Finalized.Completed())
	require.False(t, res.Settled)
	rec, _ := b.record(t, exec)
	require.Equal(t, "pending", rec.State)
	require.Equal(t, []string{"content"}, rec.Pending)
	require.Contains(t, rec.Error, "panic: boom")
	require.Zero(t, b.billed(t, exec).LedgerRows)

	broken.Store(false)
	time.Sleep(2 * time.Millisecond) // BackoffMin
	b.settleAll(t, s)
	require.Equal(t, billed{LedgerRows: 1, AccountMS: 5000, VideoReady: true, Published: true}, b.billed(t, exec))
}

// The same for an increment that panics in the worker's billing.
func TestFinalize_IncrementThatPanicsLeavesThePendingRecordToTheSweep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	exec, spec := b.video(t, 5000)
	var broken atomic.Bool
	broken.Store(true)
	incs := increments(nil)
	incs["video_ms"] = panickingIncrement(incs["video_ms"], exec.JobID, &broken)
	s := b.settler(t, quick(settle.Config{Increments: incs}))

	var res settle.Result
	var err error
	require.NotPanics(t, func() { res, err = s.Finalize(ctx, b.env.Pool, exec, spec) })
	require.ErrorIs(t, err, settle.ErrPending)
	var pe *jobguard.PanicError
	require.ErrorAs(t, err, &pe)
	require.True(t, res.Finalized.Confirmed(), "every update succeeded")
	require.False(t, res.Settled)
	rec, _ := b.record(t, exec)
	require.Equal(t, "pending", rec.State)
	require.Zero(t, b.billed(t, exec).LedgerRows)

	broken.Store(false)
	b.settleAll(t, s)
	require.Equal(t, billed{LedgerRows: 1, AccountMS: 5000, VideoReady: true, Published: true}, b.billed(t, exec))
}

// A logger and a meter that panic on every call cannot stop Run: the
// records are still settled, pass after pass, and Run returns when its
// context ends.
func TestRun_PanickingLoggerAndMeterDoNotStopTheSweeps(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.pendingRecord(t, b.s, 1000)
	var sw panicky.Switch
	s := b.settler(t, quick(settle.Config{Interval: 5 * time.Millisecond, Logger: sw.Logger(), MeterProvider: sw.MeterProvider()}))
	sw.Arm()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	confirmed := func(exec jobguard.Execution) func() bool {
		return func() bool { rec, _ := b.record(t, exec); return rec.State == "confirmed" }
	}
	require.Eventually(t, confirmed(first), 30*time.Second, 5*time.Millisecond)
	// A later pass still runs. (The record comes from a worker of its own,
	// whose content store refuses, so that Run cannot settle it first.)
	refusing := &faults{}
	refusing.set("content", -1)
	second, spec := b.video(t, 2000)
	_, err := b.settler(t, quick(settle.Config{Handlers: handlers(b.env.Pool, refusing, nil)})).Finalize(ctx, b.env.Pool, second, spec)
	require.ErrorIs(t, err, settle.ErrPending)
	require.Eventually(t, confirmed(second), 30*time.Second, 5*time.Millisecond)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// A meter or a logger that panics hides nothing of a sweep: the report
// counts every record it settled, and the sweep returns as it would have.
func TestSweep_PanickingMeterOrLoggerHidesNoRecord(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]func(*panicky.Switch) settle.Config{
		"logger": func(sw *panicky.Switch) settle.Config { return settle.Config{Logger: sw.Logger()} },
		"meter":  func(sw *panicky.Switch) settle.Config { return settle.Config{MeterProvider: sw.MeterProvider()} },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			exec := b.pendingRecord(t, b.s, 1000)
			var sw panicky.Switch
			s := b.settler(t, quick(cfg(&sw)))
			sw.Arm()
			var rep settle.Report
			var err error
			require.NotPanics(t, func() { rep, err = s.Sweep(context.Background()) })
			require.NoError(t, err)
			require.Equal(t, 1, rep.Settled, "%+v", rep)
			rec, _ := b.record(t, exec)
			require.Equal(t, "confirmed", rec.State)
		})
	}
}
