package settle_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
)

// row is every column of a record that a verdict may write, as text.
func (b *bundle) row(t *testing.T, exec jobguard.Execution) string {
	t.Helper()
	var s string
	require.NoError(t, b.env.Pool.QueryRow(context.Background(), `SELECT row_to_json(r)::text FROM (
		SELECT state, pending, attempts, next_attempt_at, last_error, updated_at FROM job_settlements
		WHERE job_id = $1 AND generation = $2) r`, exec.JobID, exec.Generation).Scan(&s))
	return s
}

// leaseLapsed waits, on the database's clock, until the record's lease has
// run out: a sweep may claim it again.
func (b *bundle) leaseLapsed(t *testing.T, exec jobguard.Execution) {
	t.Helper()
	require.Eventually(t, func() bool {
		var due bool
		require.NoError(t, b.env.Pool.QueryRow(context.Background(), `SELECT next_attempt_at <= statement_timestamp()
			FROM job_settlements WHERE job_id = $1 AND generation = $2`, exec.JobID, exec.Generation).Scan(&due))
		return due
	}, time.Minute, 5*time.Millisecond)
}

// staleAttempt starts a sweep of s whose attempt on the record waits in its
// handler, ignoring its context, until release is closed; then the handler
// fails. It returns once the attempt is in its handler, with the channel
// its sweep's report arrives on.
func (b *bundle) staleAttempt(t *testing.T, s *settle.Settler, release <-chan struct{}) <-chan settle.Report {
	t.Helper()
	var calls atomic.Int32
	in := make(chan struct{})
	b.hooks.enter = func(string) {
		if calls.Add(1) == 1 {
			close(in)
			<-release
			b.faults.set("content", 1) // this attempt's run fails
		}
	}
	out := make(chan settle.Report, 1)
	go func() { rep, _ := s.Sweep(context.Background()); out <- rep }()
	<-in
	return out
}

// A record given up while a stale attempt still ran, then reopened by an
// operator and claimed again: the stale attempt's late verdict must not
// give up the attempt that now holds the record. Reopen starts the count of
// attempts over, so the count cannot be what a verdict is fenced on.
func TestSweep_StaleVerdictLeavesTheAttemptOfAReopenedRecordAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	cfg := quick(settle.Config{MaxAttempts: 1})
	stale := quick(settle.Config{MaxAttempts: 1})
	stale.UpdateTimeout = 50 * time.Millisecond // a short lease: UpdateTimeout + BackoffMin
	cfg.UpdateTimeout = time.Minute
	a, other := b.settler(t, stale), b.settler(t, cfg)
	exec := b.pendingRecord(t, other, 4000)

	// A claims the record (attempt 1) and hangs past its lease.
	release := make(chan struct{})
	late := b.staleAttempt(t, a, release)
	b.leaseLapsed(t, exec)

	// Another sweep claims it for attempt 2, beyond MaxAttempts: given up.
	rep, err := other.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.GivenUp, "%+v", rep)

	// The operator reopens it, and a sweep claims it again: attempt 1 once
	// more, and this one is about to succeed.
	require.NoError(t, other.Reopen(ctx, exec))
	current, working := make(chan struct{}), make(chan struct{})
	b.hooks.enter = func(string) { close(working); <-current }
	done := make(chan settle.Report, 1)
	go func() { rep, _ := other.Sweep(ctx); done <- rep }()
	<-working
	before := b.row(t, exec)

	// A's handler returns at last, failed; its verdict comes now.
	close(release)
	lateRep := <-late
	require.Equal(t, settle.Report{Taken: 1, Raced: 1}, lateRep, "the stale attempt's verdict must change nothing")
	require.Equal(t, before, b.row(t, exec), "the stale attempt changed the record that another attempt holds")

	close(current)
	require.Equal(t, 1, (<-done).Settled, "the current attempt settles the record")
	require.Equal(t, billed{LedgerRows: 1, AccountMS: 4000, VideoReady: true, Published: true}, b.billed(t, exec))
}

// A record claimed by a second sweep after the first attempt's lease ran
// out, and handed back by that sweep when it was stopped: handing back
// lowers the count of attempts to what the first attempt claimed, and the
// first attempt's late verdict must still change nothing. The record is
// then claimed again and settled.
func TestSweep_StaleVerdictLeavesAHandedBackRecordAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	cfg := quick(settle.Config{MaxAttempts: 2})
	stale := cfg
	stale.UpdateTimeout = 50 * time.Millisecond
	a, other := b.settler(t, stale), b.settler(t, cfg)
	exec := b.pendingRecord(t, other, 2500)

	release := make(chan struct{})
	late := b.staleAttempt(t, a, release)
	b.leaseLapsed(t, exec)

	// A second sweep claims it (attempt 2) and is stopped in its handler:
	// it hands the attempt back.
	stopCtx, stop := context.WithCancel(ctx)
	entered := make(chan struct{})
	b.hooks.enter = func(string) { close(entered); <-stopCtx.Done() }
	stopped := make(chan error, 1)
	go func() { _, err := other.Sweep(stopCtx); stopped <- err }()
	<-entered
	stop()
	require.ErrorIs(t, <-stopped, context.Canceled)
	rec, _ := b.record(t, exec)
	require.Equal(t, 1, rec.Attempts, "the stopped attempt was handed back")
	b.hooks.enter = nil
	before := b.row(t, exec)

	close(release)
	require.Equal(t, settle.Report{Taken: 1, Raced: 1}, <-late, "the stale attempt's verdict must change nothing")
	require.Equal(t, before, b.row(t, exec), "the stale attempt changed a record it no longer holds")

	// Claimed again, it settles.
	b.settleAll(t, other)
	require.Equal(t, billed{LedgerRows: 1, AccountMS: 2500, VideoReady: true, Published: true}, b.billed(t, exec))
}

// A finalize whose update outlived Grace, so that the sweep claimed its
// record, gave it up, and an operator reopened it: the finalize's late
// failure is no verdict on the reopened record and must change nothing.
func TestFinalize_LateFailureLeavesAReopenedRecordAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	other := b.settler(t, quick(settle.Config{MaxAttempts: 1}))
	exec, spec := b.video(t, 3500)
	release := make(chan struct{})
	var calls atomic.Int32
	b.hooks.enter = func(name string) {
		if name == "content" && calls.Add(1) == 1 {
			<-release // the finalize's own run, past Grace
		}
	}
	b.faults.set("content", -1)
	done := make(chan error, 1)
	go func() { _, err := b.s.Finalize(ctx, b.env.Pool, exec, spec); done <- err }()
	require.Eventually(t, func() bool {
		rec, _ := b.record(t, exec)
		return calls.Load() == 1 && len(rec.Pending) == 1
	}, time.Minute, time.Millisecond)

	rep, err := other.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.GivenUp, "%+v", rep)
	require.NoError(t, other.Reopen(ctx, exec))
	before := b.row(t, exec)

	close(release)
	require.ErrorIs(t, <-done, settle.ErrPending)
	require.Equal(t, before, b.row(t, exec), "the finalize's late failure changed the reopened record")

	b.faults.set("content", 0)
	b.settleAll(t, other)
	require.Equal(t, billed{LedgerRows: 1, AccountMS: 3500, VideoReady: true, Published: true}, b.billed(t, exec))
}
