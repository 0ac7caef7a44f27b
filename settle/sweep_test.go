package settle_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
)

// pendingRecord finalizes a new video job whose content update fails in
// process, leaving its record pending with the video update done.
func (b *bundle) pendingRecord(t *testing.T, s *settle.Settler, durationMS int64) jobguard.Execution {
	t.Helper()
	exec, spec := b.video(t, durationMS)
	b.faults.set("content", 1)
	_, err := s.Finalize(context.Background(), b.env.Pool, exec, spec)
	require.ErrorIs(t, err, settle.ErrPending)
	time.Sleep(2 * time.Millisecond) // BackoffMin: the record is due
	return exec
}

func TestSweep_RecordThatKeepsFailingIsGivenUpVisiblyAndNeverBilled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	exec := b.pendingRecord(t, b.s, 3000)
	b.faults.set("content", -1) // the content store refuses for good

	var reports []settle.Report
	for {
		rep, err := b.s.Sweep(ctx)
		require.NoError(t, err)
		if rep.Taken > 0 {
			reports = append(reports, rep)
		}
		if rec, _ := b.record(t, exec); rec.State != "pending" {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	require.Len(t, reports, 3, "MaxAttempts attempts, each after its backoff")
	for _, rep := range reports[:2] {
		require.Equal(t, settle.Report{Taken: 1, Retrying: 1}, rep)
	}
	require.Equal(t, settle.Report{Taken: 1, GivenUp: 1}, reports[2])

	rec, _ := b.record(t, exec)
	require.Equal(t, "given_up", rec.State)
	require.Equal(t, 3, rec.Attempts)
	require.Contains(t, rec.Error, "content store refuses the write")
	require.Equal(t, billed{AccountMS: 0, VideoReady: true}, b.billed(t, exec), "a given-up record is never billed")
	logs := b.logs.String()
	require.Contains(t, logs, `level=WARN msg="settle: record given up; its usage is not billed" job_id=`+exec.JobID)
	require.Contains(t, logs, `level=WARN msg="settle: sweep" taken=1 settled=0 raced=0 retrying=0 given_up=1`)

	// Nothing takes it again, and a late finalize of the same execution
	// cannot bill it either.
	rep, err := b.s.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Taken)

	// An operator fixes the store and reopens it.
	b.faults.set("content", 0)
	require.NoError(t, b.s.Reopen(ctx, exec))
	require.ErrorIs(t, b.s.Reopen(ctx, exec), settle.ErrNotGivenUp)
	b.settleAll(t, b.s)
	require.Equal(t, billed{LedgerRows: 1, AccountMS: 3000, VideoReady: true, Published: true}, b.billed(t, exec))
}

func TestSweep_UnregisteredHandlerFailsVisiblyInsteadOfBeingSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	exec := b.pendingRecord(t, b.s, 3000)
	// A sweeper deployed without the content handler.
	logs := &testenv.Logs{}
	old := b.settler(t, quick(settle.Config{Handlers: map[string]settle.Handler{"video": handlers(b.env.Pool, b.faults, nil)["video"]},
		Logger: logs.Logger(), MaxAttempts: 2}))

	rep, err := old.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, settle.Report{Taken: 1, Retrying: 1, Unregistered: 1}, rep)
	rec, _ := b.record(t, exec)
	require.Equal(t, "pending", rec.State)
	require.Contains(t, rec.Error, `no handler registered: ["content"]`)
	require.Contains(t, logs.String(), `level=WARN msg="settle: sweep"`)
	require.Contains(t, logs.String(), `unregistered=1`)
	require.Zero(t, b.billed(t, exec).LedgerRows, "the record was not settled without its update")

	// A sweeper that has it settles the record.
	time.Sleep(5 * time.Millisecond)
	b.settleAll(t, b.s)
	require.Equal(t, billed{LedgerRows: 1, AccountMS: 3000, VideoReady: true, Published: true}, b.billed(t, exec))
}

func TestSweep_RecordOfAJobNotCompletedByItsExecutionIsGivenUpAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	exec := b.pendingRecord(t, b.s, 3000)
	// Someone moved the job by hand.
	b.env.Exec(`UPDATE jobs SET status = 'FAILED' WHERE id = $1`, exec.JobID)

	rep, err := b.s.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, settle.Report{Taken: 1, GivenUp: 1}, rep)
	rec, _ := b.record(t, exec)
	require.Equal(t, "given_up", rec.State)
	require.Equal(t, 1, rec.Attempts)
	require.Contains(t, rec.Error, "job is FAILED")
	require.Zero(t, b.billed(t, exec).LedgerRows)
	require.Equal(t, map[string]int{"video": 1}, b.runs(t, exec), "no update ran for it")
}

func TestSweep_RecordIsLeftToItsFinalizeDuringGrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	patient := b.settler(t, settle.Config{Grace: time.Hour})
	exec, spec := b.video(t, 1000)
	gate := make(chan struct{})
	b.hooks.enter = func(name string) {
		if name == "content" {
			<-gate
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := patient.Finalize(ctx, b.env.Pool, exec, spec)
		done <- err
	}()
	require.Eventually(t, func() bool { _, ok := b.record(t, exec); return ok }, 5*time.Second, time.Millisecond)

	rep, err := b.s.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Taken, "the sweep took a record its finalize is still working on")
	close(gate)
	require.NoError(t, <-done)
}

func TestSweep_LateFinalizeRacingTheSweepBillsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	exec, spec := b.video(t, 8000)
	// The finalize's content update hangs past Grace; the sweep takes the
	// record meanwhile and settles it, running the updates itself.
	gate := make(chan struct{})
	var first atomic.Bool
	b.hooks.enter = func(name string) {
		if name == "content" && first.CompareAndSwap(false, true) {
			<-gate
		}
	}
	done := make(chan settle.Result, 1)
	go func() {
		res, err := b.s.Finalize(ctx, b.env.Pool, exec, spec)
		require.NoError(t, err)
		done <- res
	}()
	require.Eventually(t, func() bool {
		rec, _ := b.record(t, exec)
		return first.Load() && slices.Equal(rec.Pending, []string{"content"})
	}, 5*time.Second, time.Millisecond)

	rep, err := b.s.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Settled)
	require.Equal(t, 1, rep.Accrued)

	close(gate) // the late finalize now finishes its updates and bills
	res := <-done
	require.True(t, res.Finalized.Confirmed())
	require.True(t, res.Settled, "the record is settled, by the sweep")
	require.Empty(t, res.Accruals, "the late finalize billed nothing")
	require.Equal(t, billed{LedgerRows: 1, AccountMS: 8000, VideoReady: true, Published: true}, b.billed(t, exec))
	// The finalize's video update was recorded before the sweep took the
	// record; its content update ran in both, and idempotent handlers bear
	// it.
	require.Equal(t, map[string]int{"video": 1, "content": 2}, b.runs(t, exec))
}

func TestSweep_ConcurrentSweepsAndFinalizesBillEachRecordOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, testenv.Config{MaxConns: 32})
	ctx := context.Background()
	const records = 40
	var execs []jobguard.Execution
	for i := range records {
		execs = append(execs, b.pendingRecord(t, b.s, int64(1000+i)))
	}
	// Eight sweepers, each on a pool of its own, all at once.
	var wg sync.WaitGroup
	start := make(chan struct{})
	var settled, raced atomic.Int64
	for range 8 {
		s := b.settler(t, quick(settle.Config{DB: b.env.Connect(testenv.Config{MaxConns: 3}), Concurrency: 2, Logger: discard()}))
		wg.Go(func() {
			<-start
			for range 20 {
				rep, err := s.Sweep(ctx)
				require.NoError(t, err)
				settled.Add(int64(rep.Settled))
				raced.Add(int64(rep.Raced))
			}
		})
	}
	close(start)
	wg.Wait()
	b.settleAll(t, b.s)

	var ledger, total int64
	require.NoError(t, b.env.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM usage_ledger), (SELECT video_ms FROM accounts)`).Scan(&ledger, &total))
	require.Equal(t, int64(records), ledger, "one ledger row per record")
	require.Equal(t, int64(records*1000+records*(records-1)/2), total, "each billed once")
	require.Equal(t, int64(records), settled.Load(), "each record settled by exactly one sweep")
	for _, exec := range execs {
		rec, _ := b.record(t, exec)
		require.Equal(t, "confirmed", rec.State)
	}
}

func TestSweep_ManyProcessesSettleOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const records = 30
	for i := range records {
		b.pendingRecord(t, b.s, int64(100+i))
	}
	procs := make([]*child, 4)
	for i := range procs {
		procs[i] = startChild(t, b.env.Pool, childConfig{DatabaseURL: b.env.DatabaseURL, Mode: modeSweep})
	}
	for _, p := range procs {
		require.NoError(t, p.wait(), p.output())
	}
	b.settleAll(t, b.s)
	var ledger, total, runs int64
	require.NoError(t, b.env.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM usage_ledger),
		(SELECT video_ms FROM accounts), (SELECT count(*) FROM handler_runs WHERE name = 'content')`).Scan(&ledger, &total, &runs))
	require.Equal(t, int64(records), ledger)
	require.Equal(t, int64(records*100+records*(records-1)/2), total)
	require.GreaterOrEqual(t, runs, int64(records))
}

func TestSweep_CancelledContextStopsAndReportsIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.s.Sweep(ctx)
	require.True(t, errors.Is(err, context.Canceled), "%v", err)
}

func TestSweep_TakesAtMostMaxPerSweep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 5 {
		b.pendingRecord(t, b.s, 100)
	}
	s := b.settler(t, quick(settle.Config{MaxPerSweep: 2, Concurrency: 3}))
	rep, err := s.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, 2, rep.Taken)
	rep, err = s.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, 2, rep.Taken)
}

func TestSweep_UnreadableRecordFailsVisibly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exec := b.pendingRecord(t, b.s, 100)
	b.env.Exec(`UPDATE job_settlements SET usage = '{"not": "a list"}' WHERE job_id = $1`, exec.JobID)
	rep, err := b.s.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, settle.Report{Taken: 1, Retrying: 1}, rep)
	rec, _ := b.record(t, exec)
	require.Contains(t, rec.Error, "unreadable record: usage:")
	require.Zero(t, b.billed(t, exec).LedgerRows)
}

func TestRun_SweepsUntilItsContextEnds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exec := b.pendingRecord(t, b.s, 100)
	s := b.settler(t, quick(settle.Config{Interval: 5 * time.Millisecond}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	require.Eventually(t, func() bool { rec, _ := b.record(t, exec); return rec.State == "confirmed" }, testenv.Patience, 5*time.Millisecond)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	require.Contains(t, b.logs.String(), `msg="settle: sweep" taken=1 settled=1`)
}

func TestSweep_UnreachableDatabaseIsTheSweepsError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := b.env.Connect(testenv.Config{MaxConns: 2})
	s := b.settler(t, quick(settle.Config{DB: pool}))
	pool.Close()
	rep, err := s.Sweep(context.Background())
	require.ErrorContains(t, err, "settle: sweep")
	require.Zero(t, rep.Taken)
	require.Contains(t, b.logs.String(), `level=WARN msg="settle: sweep" taken=0`)
}

// A sweep stopped by its context (a deploy's SIGTERM) in the middle of a
// record's last attempt hands the attempt back: the record is tried again
// and billed, not given up unbilled for an attempt that never ran out.
func TestSweep_StoppedDuringTheLastAttemptHandsItBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.settler(t, quick(settle.Config{MaxAttempts: 1}))
	exec := b.pendingRecord(t, s, 2000)
	ctx, stop := context.WithCancel(context.Background())
	entered := make(chan struct{})
	var once sync.Once
	b.hooks.enter = func(string) {
		once.Do(func() { close(entered); <-ctx.Done() }) // the first run waits for the stop
	}
	done := make(chan error, 1)
	go func() { _, err := s.Sweep(ctx); done <- err }()
	<-entered
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
	rec, _ := b.record(t, exec)
	require.Equal(t, "pending", rec.State, "not given up")
	require.Zero(t, rec.Attempts, "the stopped attempt was handed back")

	b.hooks.enter = nil
	b.settleAll(t, s)
	require.Equal(t, billed{LedgerRows: 1, AccountMS: 2000, VideoReady: true, Published: true}, b.billed(t, exec))
}

// An attempt whose handler ignores its context outlives its lease, and
// another sweep claims the record meanwhile. The late attempt's verdict
// changes nothing (it is counted as raced), so it cannot cut the newer
// attempt's lease short or overwrite its outcome; the record is billed
// once.
func TestSweep_AttemptThatOutlivedItsLeaseLeavesTheNewerClaimAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := quick(settle.Config{})
	cfg.UpdateTimeout = 400 * time.Millisecond // the lease is UpdateTimeout + BackoffMin
	a, other := b.settler(t, cfg), b.settler(t, cfg)
	exec := b.pendingRecord(t, a, 1500)

	var calls atomic.Int32
	firstIn, secondIn := make(chan struct{}), make(chan struct{})
	releaseFirst, releaseSecond := make(chan struct{}), make(chan struct{})
	b.hooks.enter = func(string) {
		switch calls.Add(1) {
		case 1:
			close(firstIn)
			<-releaseFirst // ignores its context
		case 2:
			close(secondIn)
			<-releaseSecond
		}
	}
	first := make(chan settle.Report, 1)
	go func() { rep, _ := a.Sweep(context.Background()); first <- rep }()
	<-firstIn
	time.Sleep(cfg.UpdateTimeout + 100*time.Millisecond) // the lease runs out
	second := make(chan settle.Report, 1)
	go func() { rep, _ := other.Sweep(context.Background()); second <- rep }()
	<-secondIn

	close(releaseFirst)
	late := <-first
	require.Equal(t, 1, late.Raced, "the late attempt's verdict changed nothing: %+v", late)
	require.Zero(t, late.Retrying+late.GivenUp)
	rec, _ := b.record(t, exec)
	require.Equal(t, 2, rec.Attempts, "the newer claim stands")

	close(releaseSecond)
	<-second
	b.settleAll(t, a)
	require.Equal(t, billed{LedgerRows: 1, AccountMS: 1500, VideoReady: true, Published: true}, b.billed(t, exec))
}

// An UpdateTimeout of the longest duration ("no timeout") still leases the
// record it takes: the lease, UpdateTimeout + BackoffMin, saturates rather
// than wrapping into the past, so another sweep leaves the record alone
// while the first one works on it.
func TestSweep_LongestUpdateTimeoutStillLeasesTheRecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exec := b.pendingRecord(t, b.s, 1500)
	cfg := quick(settle.Config{})
	cfg.UpdateTimeout = time.Duration(math.MaxInt64)
	a, other := b.settler(t, cfg), b.settler(t, cfg)

	var calls atomic.Int32
	firstIn, release := make(chan struct{}), make(chan struct{})
	b.hooks.enter = func(string) {
		if calls.Add(1) == 1 {
			close(firstIn)
			<-release
		}
	}
	first := make(chan settle.Report, 1)
	go func() { rep, _ := a.Sweep(context.Background()); first <- rep }()
	<-firstIn
	rep, err := other.Sweep(context.Background())
	require.NoError(t, err)
	require.Zero(t, rep.Taken, "the record is leased to the first sweep")
	require.EqualValues(t, 1, calls.Load())

	close(release)
	require.Equal(t, 1, (<-first).Settled)
	require.Equal(t, billed{LedgerRows: 1, AccountMS: 1500, VideoReady: true, Published: true}, b.billed(t, exec))
}
