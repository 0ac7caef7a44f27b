package settle_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// envChild, set in a child process, holds its JSON childConfig.
const envChild = "JOBGUARD_SETTLE_CHILD"

// The modes of a child process.
const (
	// modeFinalize finalizes one job and dies of SIGKILL at its kill point.
	modeFinalize = "finalize"
	// modeSweep sweeps until a sweep finds nothing due.
	modeSweep = "sweep"
)

// The points where a finalizing child kills itself.
const (
	// killBeforeCompletionCommit: the completion's statement, which writes
	// the record too, has run; its transaction has not committed.
	killBeforeCompletionCommit = "before-completion-commit"
	// killAfterCommit: the completion and its record committed; no update
	// has done anything yet.
	killAfterCommit = "after-commit"
	// killDuringVideo, killDuringContent: that update did its work, and its
	// success is not yet recorded.
	killDuringVideo   = "during-update-video"
	killDuringContent = "during-update-content"
	// killBeforeBilling: every update succeeded (all but the last one
	// recorded, which the billing would record); the billing transaction
	// has not begun.
	killBeforeBilling = "after-updates"
	// killAfterConfirm: the statement that confirms the record and inserts
	// its ledger rows has answered; no increment has run, nothing has
	// committed.
	killAfterConfirm = "after-confirm"
	// killDuringBilling: inside the billing transaction, after the ledger
	// row and the increment, before the commit.
	killDuringBilling = "during-billing"
	// killAfterBilling: the billing committed; Finalize has not returned.
	killAfterBilling = "after-billing"
)

type childConfig struct {
	DatabaseURL string `json:"database_url"`
	Mode        string `json:"mode"`
	JobID       string `json:"job_id,omitempty"`
	DurationMS  int64  `json:"duration_ms,omitempty"`
	Kill        string `json:"kill,omitempty"`
	// AppName is the application_name of the child's connections.
	AppName string `json:"app_name"`
	// Panic, in a sweeping child, is the job whose content handler panics.
	Panic string `json:"panic,omitempty"`
}

func TestMain(m *testing.M) {
	if raw := os.Getenv(envChild); raw != "" {
		os.Exit(childMain(raw))
	}
	os.Exit(m.Run())
}

// die is SIGKILL, sent by the process to itself: no deferred call, no
// rollback, no goodbye to the server.
func die() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// childMain is the body of a child process.
func childMain(raw string) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return 2
	}
	ctx := context.Background()
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	pcfg.ConnConfig.RuntimeParams["application_name"] = cfg.AppName
	h := &hooks{}
	switch cfg.Kill {
	case killAfterCommit:
		h.enter = func(string) { die() }
	case killDuringVideo, killDuringContent:
		h.worked = func(name string) {
			if cfg.Kill == "during-update-"+name {
				die()
			}
		}
	case killDuringBilling:
		h.billing = die
	case killBeforeCompletionCommit, killBeforeBilling, killAfterConfirm, killAfterBilling:
		pcfg.ConnConfig.Tracer = &killTracer{kill: cfg.Kill}
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer pool.Close()
	guard, err := jobguard.New(ctx, pool, jobguard.DefaultTable())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	hs := handlers(pool, &faults{}, h)
	if cfg.Panic != "" {
		var broken atomic.Bool
		broken.Store(true)
		hs["content"] = panickingHandler(hs["content"], cfg.Panic, &broken)
	}
	s, err := settle.New(ctx, quick(settle.Config{
		Guard: guard, DB: pool, Handlers: hs, Increments: increments(h), Logger: discard(),
	}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	switch cfg.Mode {
	case modeFinalize:
		_, err := s.Finalize(ctx, pool, jobguard.Execution{JobID: cfg.JobID, Generation: 1}, videoSpec(cfg.JobID, cfg.DurationMS))
		fmt.Fprintf(os.Stderr, "finalize returned (%v) without reaching kill point %q\n", err, cfg.Kill)
		return 3
	case modeSweep:
		for range 200 {
			rep, err := s.Sweep(ctx)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			if rep.Taken == 0 {
				return 0
			}
		}
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown mode", cfg.Mode)
	return 2
}

// killTracer kills the process when the completion's transaction, whose
// statement writes the record, is about to commit
// (before-completion-commit); when the billing transaction is about to
// confirm the record (after-updates); once the confirmation and its ledger
// rows have answered (after-confirm); or once the billing has committed
// (after-billing). It knows each by its statement, whether it travels alone
// or in a batch with BEGIN or others.
type killTracer struct {
	kill       string
	completing atomic.Bool
	billing    atomic.Bool
}

func (bt *killTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	switch {
	case strings.Contains(d.SQL, "SET state = 'confirmed'"):
		if bt.kill == killBeforeBilling {
			die()
		}
		bt.billing.Store(true)
	case strings.Contains(d.SQL, "INSERT INTO") && strings.Contains(d.SQL, "job_settlements"):
		// The record, written by the completion's statement.
		bt.completing.Store(true)
	case strings.EqualFold(d.SQL, "commit") && bt.kill == killBeforeCompletionCommit && bt.completing.Load():
		die()
	}
	return ctx
}

// TraceBatchStart sees the statements that travel with BEGIN.
func (bt *killTracer) TraceBatchStart(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	for _, q := range d.Batch.QueuedQueries {
		bt.TraceQueryStart(ctx, c, pgx.TraceQueryStartData{SQL: q.SQL})
	}
	return ctx
}

func (bt *killTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd kills after-confirm once the batch that confirms the record
// and inserts its ledger rows has answered.
func (bt *killTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {
	if bt.kill == killAfterConfirm && bt.billing.Load() {
		die()
	}
}

func (bt *killTracer) TraceQueryEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if bt.kill == killAfterBilling && bt.billing.Load() && d.CommandTag.String() == "COMMIT" {
		die()
	}
}

// videoSpec is the spec b.video returns, for a child to build alone.
func videoSpec(jobID string, durationMS int64) settle.Spec {
	args := videoArgs{VideoID: "video-" + jobID[:8], DurationMS: durationMS}
	return settle.Spec{
		Updates: []settle.Update{{Name: "video", Args: args}, {Name: "content", Args: args}},
		Usage:   []usage.Entry{{Account: "acct-1", Meter: "video_ms", Quantity: durationMS}},
	}
}

// child is a running child process.
type child struct {
	cmd  *exec.Cmd
	app  string
	out  bytes.Buffer
	done chan error
	db   *pgxpool.Pool
}

var children atomic.Int64

// startChild starts a child process; db is where to watch its sessions.
func startChild(t *testing.T, db *pgxpool.Pool, cfg childConfig) *child {
	t.Helper()
	cfg.AppName = fmt.Sprintf("settle-child-%d-%d", os.Getpid(), children.Add(1))
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	c := &child{cmd: exec.Command(os.Args[0], "-test.run=^$"), app: cfg.AppName, db: db, done: make(chan error, 1)}
	c.cmd.Env = append(os.Environ(), envChild+"="+string(raw))
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	require.NoError(t, c.cmd.Start())
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		<-c.done
	})
	return c
}

// wait waits for the child's end, and then for the end of its sessions
// on the server: a statement it sent just before it died may still be
// running there, and commit. At most thirty seconds.
func (c *child) wait() error {
	deadline := time.After(30 * time.Second)
	var err error
	select {
	case err = <-c.done:
		c.done <- err
	case <-deadline:
		return errors.New("child still running after 30s")
	}
	for {
		var sessions int
		if qerr := c.db.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`,
			c.app).Scan(&sessions); qerr != nil {
			return qerr
		}
		if sessions == 0 {
			return err
		}
		select {
		case <-deadline:
			return fmt.Errorf("the child's %d sessions still open after 30s", sessions)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func (c *child) killed() bool {
	ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func (c *child) output() string { return c.out.String() }

// A worker process killed at any point of its finalize after the
// completion committed leaves a record; without a sweep the job stays
// COMPLETED and unbilled (what jobguard and usage alone leave), and one
// sweep bills it exactly once with its metadata READY.
func TestFinalize_WorkerKilledAtAnyPointIsSettledOnceBySweep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kill string
		// billed: the kill came after the billing committed.
		billed bool
		// rerun: the update whose work was done, and its success not
		// recorded, when the worker died: the sweep runs it again.
		rerun string
	}{
		{kill: killAfterCommit},
		{kill: killDuringVideo, rerun: "video"},
		{kill: killDuringContent, rerun: "content"},
		{kill: killBeforeBilling},
		{kill: killAfterConfirm},
		{kill: killDuringBilling},
		{kill: killAfterBilling, billed: true},
	} {
		t.Run(tc.kill, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			exec, _ := b.video(t, 60_000)
			p := startChild(t, b.env.Pool, childConfig{DatabaseURL: b.env.DatabaseURL, Mode: modeFinalize, JobID: exec.JobID, DurationMS: 60_000, Kill: tc.kill})
			err := p.wait()
			require.Error(t, err, p.output())
			require.True(t, p.killed(), "the worker was not killed at %s: %v\n%s", tc.kill, err, p.output())

			require.Equal(t, "COMPLETED", b.jobs.Read(t, exec.JobID).Status, "the completion committed before the kill")
			rec, ok := b.record(t, exec)
			require.True(t, ok, "the completion committed without its record")
			before := b.billed(t, exec)
			if tc.billed {
				require.Equal(t, "confirmed", rec.State)
				require.Equal(t, billed{LedgerRows: 1, AccountMS: 60_000, VideoReady: true, Published: true}, before)
			} else {
				require.Equal(t, "pending", rec.State)
				require.Zero(t, before.LedgerRows, "billed before the kill point")
				require.Zero(t, before.AccountMS)
			}
			runsBefore := b.runs(t, exec)
			if tc.rerun != "" {
				require.Equal(t, 1, runsBefore[tc.rerun], "the %s update did its work before the kill", tc.rerun)
				require.Contains(t, rec.Pending, tc.rerun, "and its success was not recorded")
			}

			pendingBefore := rec.Pending
			rep := b.settleAll(t, b.s)
			if tc.billed {
				require.Zero(t, rep.Taken, "a confirmed record is not taken again")
			} else {
				require.Equal(t, 1, rep.Settled)
			}
			rec, _ = b.record(t, exec)
			require.Equal(t, "confirmed", rec.State)
			require.Equal(t, billed{LedgerRows: 1, AccountMS: 60_000, VideoReady: true, Published: true}, b.billed(t, exec),
				"billed exactly once, metadata READY")
			// The sweep ran exactly the updates the record had pending: a
			// recorded success is not run again, and a rerun of an
			// idempotent handler leaves the metadata as one run would.
			runs := b.runs(t, exec)
			for _, name := range []string{"video", "content"} {
				want := runsBefore[name]
				if slices.Contains(pendingBefore, name) {
					want++
				}
				require.Equal(t, want, runs[name], "runs of %s (pending before the sweep: %v)", name, pendingBefore)
			}
			// A second sweep, and a third process's, change nothing.
			rep, err = b.s.Sweep(ctx)
			require.NoError(t, err)
			require.Zero(t, rep.Taken)
		})
	}
}

// A worker killed after its completion's statement ran, before its
// transaction committed, leaves neither the completion nor the record it
// wrote with it: the job is still the execution's (the reclaimer's, once
// it is stuck), no update ran, and no sweep finds anything to bill.
func TestFinalize_WorkerKilledBeforeTheCompletionCommitsLeavesNoRecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exec, _ := b.video(t, 60_000)
	p := startChild(t, b.env.Pool, childConfig{DatabaseURL: b.env.DatabaseURL, Mode: modeFinalize, JobID: exec.JobID, DurationMS: 60_000,
		Kill: killBeforeCompletionCommit})
	err := p.wait()
	require.Error(t, err, p.output())
	require.True(t, p.killed(), "the worker was not killed at %s: %v\n%s", killBeforeCompletionCommit, err, p.output())

	require.Equal(t, "PROCESSING", b.jobs.Read(t, exec.JobID).Status, "the completion did not commit")
	_, ok := b.record(t, exec)
	require.False(t, ok, "a record without its completion")
	require.Empty(t, b.runs(t, exec))
	rep := b.settleAll(t, b.s)
	require.Zero(t, rep.Taken)
	require.Zero(t, b.billed(t, exec).LedgerRows)
}

// A handler that panics on a record, in a process that only sweeps (the
// reclaimer's, say), must not end that process: before, the panic went up a
// sweep worker's goroutine, which nothing can recover, and killed it, and
// it did again at every claim of the record. The process lives, the other
// record is settled, and the panicking one is left pending with its cause.
func TestSweep_HandlerThatPanicsDoesNotKillTheSweepingProcess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	good := b.pendingRecord(t, b.s, 1000)
	bad := b.pendingRecord(t, b.s, 2000)
	p := startChild(t, b.env.Pool, childConfig{DatabaseURL: b.env.DatabaseURL, Mode: modeSweep, Panic: bad.JobID})
	err := p.wait()
	require.NoError(t, err, "the sweeping process died:\n%s", p.output())
	require.NotContains(t, p.output(), "goroutine ")

	rec, _ := b.record(t, good)
	require.Equal(t, "confirmed", rec.State)
	rec, _ = b.record(t, bad)
	require.NotEqual(t, "confirmed", rec.State)
	require.GreaterOrEqual(t, rec.Attempts, 1)
	require.Contains(t, rec.Error, "panic: boom")
	require.Zero(t, b.billed(t, bad).LedgerRows)
}
