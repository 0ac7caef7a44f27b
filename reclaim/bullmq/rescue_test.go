package bullmq_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/lease"
	"github.com/jobguard/jobguard/reclaim"
)

// event is a line deliver.mjs prints.
type event struct {
	Event        string `json:"event"`
	ID           string `json:"id"`
	AttemptsMade int    `json:"attemptsMade"`
	BullMQ       string `json:"bullmq"`
	Reason       string `json:"reason"`
}

// delivering is a running deliver.mjs: its events, its stdin for the
// verdicts, and its process.
type delivering struct {
	events <-chan event
	stdin  io.Writer
	stderr *bytes.Buffer
	proc   *os.Process
}

// runDeliver starts deliver.mjs with BullMQ m over one job naming rowID
// ("-": none) and a lock of lockMs ("": a minute), and waits for its
// worker to be ready. The process is stopped at cleanup.
func runDeliver(t *testing.T, m *major, env *testenv.Env, prefix, queue, rowID, lockMs string) *delivering {
	t.Helper()
	node := nodeOrSkip(t, m)
	args := []string{"deliver.mjs", m.folder, env.RedisURL, prefix, queue, rowID}
	if lockMs != "" {
		args = append(args, lockMs)
	}
	cmd := exec.Command(node, args...)
	cmd.Dir = "testdata"
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	d := &delivering{stdin: stdin, stderr: &bytes.Buffer{}}
	cmd.Stderr = d.stderr
	require.NoError(t, cmd.Start())
	events := make(chan event, 16)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		defer close(events)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev event
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				events <- ev
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped one too
		_ = stdin.Close()                       // the script stops when stdin closes
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	d.events, d.proc = events, cmd.Process
	require.Equal(t, "ready", d.next(t).Event)
	return d
}

// next returns the script's next event.
func (d *delivering) next(t *testing.T) event {
	t.Helper()
	select {
	case ev, ok := <-d.events:
		require.True(t, ok, "deliver.mjs exited: %s", d.stderr)
		return ev
	case <-time.After(testenv.Patience):
		t.Fatalf("no event from deliver.mjs: %s", d.stderr)
		return event{}
	}
}

// tell sends the processor its verdict.
func (d *delivering) tell(t *testing.T, verdict string) {
	t.Helper()
	_, err := io.WriteString(d.stdin, verdict+"\n")
	require.NoError(t, err)
}

// verdict is what a BullMQ processor reporting for a Go worker tells
// BullMQ of the Go side's err, as docs/operator.md maps it: a permanent
// error is unrecoverable, a loss to another attempt moves the job back,
// anything else is retried.
func verdict(err error) string {
	switch {
	case err == nil:
		return "done"
	case jobguard.IsPermanent(err):
		return "permanent"
	case errors.Is(err, jobguard.ErrRequeued):
		return "requeued"
	}
	return "error"
}

// A Go worker behind a real BullMQ worker only looked dead (stopped, cut
// off) past its lease, and the reclaimer, reading the queue through the
// BullMQ source, rescued its job meanwhile. When it comes back, its save
// is refused as a loss to another attempt, which is not permanent: the
// processor moves the job back instead of failing it, BullMQ delivers it
// again at once, and that delivery starts the QUEUED row and completes it,
// once. Told as permanent, BullMQ would fail the job for good while its
// row waits in QUEUED.
func TestRescue_ComebackBehindARealBullMQWorkerIsDeliveredAgain(t *testing.T) {
	t.Parallel()
	eachMajor(t, func(t *testing.T, m *major) {
		ctx := context.Background()
		env := testenv.New(t)
		env.Exec(lease.Migration)
		jobs := fixture.Create(t, env, fixture.Default)
		h := &fixture.Handover{}
		sg, err := jobguard.NewStartGuard(jobs.Guard, env.Redis, jobguard.StartGuardConfig{Owner: h})
		require.NoError(t, err)
		stopped := h.Take(t, env)
		id := jobs.Insert(t, fixture.Job{Status: jobs.Table.Statuses.Queued})
		prefix := env.Prefix + ":{bull}"
		d := runDeliver(t, m, env, prefix, "chapters", id, "")

		first := d.next(t)
		require.Equal(t, "active", first.Event)
		require.Contains(t, first.BullMQ, m.version+".")
		comeback, err := sg.Start(ctx, env.Pool, id)
		require.NoError(t, err)

		require.NoError(t, stopped.Stop(ctx)) // dead, as the reclaimer sees it
		h.Take(t, env)                        // the next start is another process's
		r, err := reclaim.New(reclaim.Config{Guard: jobs.Guard, DB: env.Pool, Redis: env.Redis,
			Source:  newSource(t, env, prefix, "chapters", "rowId"),
			Workers: &lease.Workers{}, Limits: reclaim.StaticLimits{"chapter": time.Hour}})
		require.NoError(t, err)
		rep, err := r.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{id}, rep.RescuedIDs)
		require.Equal(t, 1, rep.WithinLimit, "the source lists the job BullMQ holds")

		saved := jobs.Guard.CompleteIfActive(ctx, env.Pool, comeback)
		require.ErrorIs(t, saved, jobguard.ErrJobTerminal)
		d.tell(t, verdict(saved))

		again := d.next(t)
		require.Equal(t, "active", again.Event, "BullMQ delivers the job again (%+v)", again)
		require.Equal(t, first.ID, again.ID)
		require.Equal(t, first.AttemptsMade, again.AttemptsMade, "no attempt used")
		next, err := sg.Start(ctx, env.Pool, id)
		require.NoError(t, err)
		d.tell(t, verdict(jobs.Guard.CompleteIfActive(ctx, env.Pool, next)))
		require.Equal(t, "completed", d.next(t).Event)
		row := jobs.Read(t, id)
		require.Equal(t, jobs.Table.Statuses.Completed, row.Status)
		require.Equal(t, comeback.Generation+2, row.Generation, "started, rescued, started again")
	})
}

// BullMQ's own redelivery and the reclaimer's rescue meet over a stopped
// worker process: BullMQ's stalled check in another worker process moves
// the job whose lock lapsed back to wait before the rescue, and that
// delivery starts the row under its live lease: the rescue finds nothing
// to do. The stopped process, continued, is refused (a permanent loss: the
// job is done), and BullMQ turns its answer away by its lock: the job
// completed once, and stays completed.
func TestRescue_BullMQStalledCheckAndTheRescueMeet(t *testing.T) {
	t.Parallel()
	eachMajor(t, func(t *testing.T, m *major) {
		ctx := context.Background()
		env := testenv.New(t)
		env.Exec(lease.Migration)
		jobs := fixture.Create(t, env, fixture.Default)
		h := &fixture.Handover{}
		sg, err := jobguard.NewStartGuard(jobs.Guard, env.Redis, jobguard.StartGuardConfig{Owner: h})
		require.NoError(t, err)
		stopped := h.Take(t, env)
		id := jobs.Insert(t, fixture.Job{Status: jobs.Table.Statuses.Queued})
		prefix := env.Prefix + ":{bull}"
		const lock = "1000" // ms; the stalled check runs every 500 ms
		first := runDeliver(t, m, env, prefix, "chapters", id, lock)
		held := first.next(t)
		require.Equal(t, "active", held.Event)
		comeback, err := sg.Start(ctx, env.Pool, id)
		require.NoError(t, err)

		// The first process stops; its lease lapses with it.
		require.NoError(t, first.proc.Signal(syscall.SIGSTOP))
		require.NoError(t, stopped.Stop(ctx))
		h.Take(t, env) // the next start is another process's
		second := runDeliver(t, m, env, prefix, "chapters", "-", lock)
		again := second.next(t)
		require.Equal(t, "active", again.Event, "BullMQ's stalled check hands the job over (%+v)", again)
		require.Equal(t, held.ID, again.ID)
		next, err := sg.Start(ctx, env.Pool, id)
		require.NoError(t, err)

		r, err := reclaim.New(reclaim.Config{Guard: jobs.Guard, DB: env.Pool, Redis: env.Redis,
			Source:  newSource(t, env, prefix, "chapters", "rowId"),
			Workers: &lease.Workers{}, Limits: reclaim.StaticLimits{"chapter": time.Hour}})
		require.NoError(t, err)
		rep, err := r.Sweep(ctx)
		require.NoError(t, err)
		require.Zero(t, rep.Rescued, "BullMQ's delivery started the job first")

		second.tell(t, verdict(jobs.Guard.CompleteIfActive(ctx, env.Pool, next)))
		require.Equal(t, "completed", second.next(t).Event)

		require.NoError(t, first.proc.Signal(syscall.SIGCONT))
		late := jobs.Guard.CompleteIfActive(ctx, env.Pool, comeback)
		require.True(t, jobguard.IsPermanent(late), "the job is done: %v", late)
		require.NotErrorIs(t, late, jobguard.ErrRequeued)
		first.tell(t, verdict(late))
		// BullMQ turns the stale answer away by its lock ("Missing lock
		// for job 1. moveToFinished"), after the renewals the stopped
		// process missed failed; it never ends the job a second time.
		for ev := first.next(t); ; ev = first.next(t) {
			t.Logf("the stopped process, continued: %+v", ev)
			require.NotContains(t, []string{"completed", "failed"}, ev.Event, "%+v", ev)
			if ev.Event == "error" && strings.Contains(ev.Reason, "Missing lock") {
				break
			}
		}
		state, err := env.Redis.ZScore(ctx, prefix+":chapters:completed", held.ID).Result()
		require.NoError(t, err, "the job is in BullMQ's completed set")
		require.NotZero(t, state)
		_, err = env.Redis.ZScore(ctx, prefix+":chapters:failed", held.ID).Result()
		require.Error(t, err, "and not in its failed set")
		row := jobs.Read(t, id)
		require.Equal(t, jobs.Table.Statuses.Completed, row.Status)
		require.Equal(t, next.Generation, row.Generation)
		require.Equal(t, comeback.Generation+1, next.Generation, "started, started again by BullMQ's delivery")
	})
}
