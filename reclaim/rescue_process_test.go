package reclaim_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/chaos"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/lease"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/watch"
)

// envWorker, set in a child process, holds its JSON workerConfig.
const envWorker = "JOBGUARD_RESCUE_WORKER"

// workerConfig is what a child worker process runs one job with.
type workerConfig struct {
	DatabaseURL   string `json:"database_url"`
	NoticeChannel string `json:"notice_channel"`
	JobID         string `json:"job_id"`
	TTLMS         int64  `json:"ttl_ms"`
}

func TestMain(m *testing.M) {
	if raw := os.Getenv(envWorker); raw != "" {
		os.Exit(workerMain(raw))
	}
	os.Exit(m.Run())
}

// workerMain is a worker process: it takes a lease, starts its job under
// it, watches the execution, and says "started <generation>". Its call
// then hangs until a line arrives on stdin; then it tries what a late
// execution tries, a heartbeat and the save, and says what each got.
func workerMain(raw string) int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "worker config:", err)
		return 2
	}
	ctx := context.Background()
	fail := func(err error) int { fmt.Fprintln(os.Stderr, err); return 2 }
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return fail(err)
	}
	defer pool.Close()
	guard, err := jobguard.NewWithConfig(ctx, pool, jobguard.DefaultTable(), jobguard.GuardConfig{
		Shared: jobguard.Shared{Markers: jobguard.MarkersPostgres, NoticeChannel: cfg.NoticeChannel}})
	if err != nil {
		return fail(err)
	}
	ttl := time.Duration(cfg.TTLMS) * time.Millisecond
	l, err := lease.New(pool, lease.Config{TTL: ttl})
	if err != nil {
		return fail(err)
	}
	if err := l.Start(ctx); err != nil {
		return fail(err)
	}
	w, err := watch.New(watch.Config{Guard: guard, DB: pool, Transport: watch.Transport{Postgres: pool}, CheckInterval: time.Hour})
	if err != nil {
		return fail(err)
	}
	go func() { _ = w.Run(ctx) }()
	<-w.Ready()
	sg, err := jobguard.NewStartGuard(guard, nil, jobguard.StartGuardConfig{Owner: l})
	if err != nil {
		return fail(err)
	}
	exec, err := sg.Start(ctx, pool, cfg.JobID)
	if err != nil {
		return fail(err)
	}
	runCtx, release := w.Watch(ctx, exec)
	defer release()
	var out sync.Mutex
	say := func(format string, args ...any) { out.Lock(); fmt.Printf(format+"\n", args...); out.Unlock() }
	go func() {
		<-runCtx.Done()
		say("cancelled: %v", context.Cause(runCtx))
	}()
	say("started %d", exec.Generation)
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // the hanging call
	<-runCtx.Done()                                   // the notice, delivered once the process runs again
	say("touch: %v", guard.Touch(ctx, pool, exec))
	say("complete: %v", guard.CompleteIfActive(ctx, pool, exec))
	say("lease: %v", l.Err())
	return 0
}

// worker is a child worker process.
type worker struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *testenv.Logs
	done  chan struct{}
	gen   int64
	jobID string
}

// startWorker starts a worker process on jobID and waits until it has
// started the job.
func startWorker(t *testing.T, env *testenv.Env, jobID string, ttl time.Duration) *worker {
	t.Helper()
	raw, err := json.Marshal(workerConfig{DatabaseURL: env.DatabaseURL, NoticeChannel: env.Schema, JobID: jobID, TTLMS: ttl.Milliseconds()})
	require.NoError(t, err)
	w := &worker{cmd: exec.Command(os.Args[0], "-test.run=^$"), out: &testenv.Logs{}, done: make(chan struct{}), jobID: jobID}
	w.cmd.Env = append(os.Environ(), envWorker+"="+string(raw))
	w.cmd.Stdout, w.cmd.Stderr = w.out, w.out
	w.cmd.SysProcAttr = chaos.ProcAttr(syscall.SIGKILL)
	w.in, err = w.cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, w.cmd.Start())
	go func() { _ = w.cmd.Wait(); close(w.done) }()
	t.Cleanup(func() {
		_ = w.cmd.Process.Signal(syscall.SIGCONT)
		_ = w.cmd.Process.Kill()
		<-w.done
	})
	waitUntil(t, "the worker started its job", func() bool {
		select {
		case <-w.done:
			t.Fatalf("the worker ended: %s", w.out.String())
		default:
		}
		_, err := fmt.Sscanf(w.out.String(), "started %d", &w.gen)
		return err == nil
	})
	return w
}

// waitUntil polls cond for up to testenv.Patience.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > testenv.Patience {
			t.Fatalf("%s: not within %v", what, testenv.Patience)
		}
	}
}

// sweeping runs the reclaimer with the rescue every interval until the
// test ends.
func sweeping(t *testing.T, jobs *fixture.Jobs, guard *jobguard.Guard, interval time.Duration) {
	t.Helper()
	r, _ := newReclaimer(t, jobs, reclaim.Config{Guard: guard, Workers: &lease.Workers{}, Interval: interval,
		Limits: reclaim.StaticLimits{"chapter": time.Hour}, Notices: publisher(t, jobs, guard)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			_, _ = r.Sweep(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(interval):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

func publisher(t *testing.T, jobs *fixture.Jobs, guard *jobguard.Guard) reclaim.Notifier {
	t.Helper()
	p, err := watch.NewPublisher(guard, watch.Transport{Postgres: jobs.Env.Pool})
	require.NoError(t, err)
	return p
}

// rescuedAt waits until the job is QUEUED at generation gen+1 and
// returns when the rescue wrote it, on the database's clock.
func rescuedAt(t *testing.T, env *testenv.Env, id string, gen int64) time.Time {
	t.Helper()
	var at time.Time
	waitUntil(t, "the rescue of "+id, func() bool {
		var status string
		var g int64
		require.NoError(t, env.Pool.QueryRow(context.Background(),
			`SELECT status, generation, updated_at FROM jobs WHERE id = $1`, id).Scan(&status, &g, &at))
		return status == "QUEUED" && g == gen+1
	})
	return at
}

func dbNow(t *testing.T, env *testenv.Env) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT now()`).Scan(&now))
	return now
}

// processSetup is the bundled table with its markers in Postgres, the
// workers table, and a guard every process shares the settings of.
func processSetup(t *testing.T) (*fixture.Jobs, *jobguard.Guard) {
	t.Helper()
	env := testenv.New(t)
	env.Exec(lease.Migration)
	jobs := fixture.Create(t, env, fixture.Default)
	return jobs, jobs.GuardWith(t, jobguard.Shared{Markers: jobguard.MarkersPostgres})
}

// Worker processes killed with SIGKILL mid-job, 20 of them: each job is
// rescued within the bound (the lease's TTL plus one reclaimer interval,
// plus a sweep), then completes exactly once on another worker, and the
// dead execution's late save is refused. The measured rescue times are
// logged beside the bound.
func TestRescue_KilledWorkerProcessesJobsCompleteOnceElsewhere(t *testing.T) {
	t.Parallel()
	const ttl, interval, kills, perRound = 2 * time.Second, 250 * time.Millisecond, 20, 5
	ctx := context.Background()
	jobs, guard := processSetup(t)
	env := jobs.Env
	sweeping(t, jobs, guard, interval)

	other, err := lease.New(env.Pool, lease.Config{TTL: ttl})
	require.NoError(t, err)
	require.NoError(t, other.Start(ctx))
	t.Cleanup(func() { _ = other.Stop(ctx) })
	sg, err := jobguard.NewStartGuard(guard, nil, jobguard.StartGuardConfig{Owner: other})
	require.NoError(t, err)

	var took []time.Duration
	for round := 0; round < kills/perRound; round++ {
		ws := make([]*worker, perRound)
		var wg sync.WaitGroup
		for i := range ws {
			id := jobs.Insert(t, fixture.Job{Status: "QUEUED"})
			wg.Add(1)
			go func() { defer wg.Done(); ws[i] = startWorker(t, env, id, ttl) }()
		}
		wg.Wait()
		killAt := dbNow(t, env)
		for _, w := range ws {
			require.NoError(t, w.cmd.Process.Kill())
		}
		for _, w := range ws {
			<-w.done
			took = append(took, rescuedAt(t, env, w.jobID, w.gen).Sub(killAt))
			next, err := sg.Start(ctx, env.Pool, w.jobID)
			require.NoError(t, err, "the rescued job is not refused")
			require.Equal(t, w.gen+2, next.Generation)
			require.ErrorIs(t, guard.CompleteIfActive(ctx, env.Pool, jobguard.Execution{JobID: w.jobID, Generation: w.gen}),
				jobguard.ErrJobTerminal, "the killed execution's save")
			require.NoError(t, guard.CompleteIfActive(ctx, env.Pool, next))
			require.ErrorIs(t, guard.CompleteIfActive(ctx, env.Pool, next), jobguard.ErrJobTerminal, "a second completion")
		}
	}
	var completed int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status = 'COMPLETED'`).Scan(&completed))
	require.Equal(t, kills, completed)
	slices.Sort(took)
	t.Logf("%d kills: rescued %v (min) / %v (median) / %v (max) after the kill, on the database's clock; "+
		"bound TTL + Interval = %v, plus a sweep", kills, took[0].Round(time.Millisecond),
		took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), ttl+interval)
}

// A worker process stopped (SIGSTOP) past its lease is rescued; its job
// starts elsewhere; continued (SIGCONT), its execution is cancelled by
// the notice and its heartbeat and save are refused by the generation.
func TestRescue_StoppedWorkerComesBackToRefusals(t *testing.T) {
	t.Parallel()
	const ttl, interval = 2 * time.Second, 250 * time.Millisecond
	ctx := context.Background()
	jobs, guard := processSetup(t)
	env := jobs.Env
	sweeping(t, jobs, guard, interval)

	id := jobs.Insert(t, fixture.Job{Status: "QUEUED"})
	w := startWorker(t, env, id, ttl)
	stopAt := dbNow(t, env)
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGSTOP))
	at := rescuedAt(t, env, id, w.gen)
	t.Logf("rescued %v after the stop; bound TTL + Interval = %v, plus a sweep", at.Sub(stopAt).Round(time.Millisecond), ttl+interval)

	sg, err := jobguard.NewStartGuard(guard, nil, jobguard.StartGuardConfig{})
	require.NoError(t, err)
	next, err := sg.Start(ctx, env.Pool, id)
	require.NoError(t, err)

	require.NoError(t, w.cmd.Process.Signal(syscall.SIGCONT))
	_, err = io.WriteString(w.in, "go\n")
	require.NoError(t, err)
	select {
	case <-w.done:
	case <-time.After(testenv.Patience):
		t.Fatalf("the continued worker did not finish within %v\n%s", testenv.Patience, w.out.String())
	}
	out := w.out.String()
	t.Logf("the continued worker said:\n%s", strings.TrimSpace(out))
	require.Contains(t, out, "cancelled: ")
	require.Regexp(t, `touch: jobguard: job is terminal for this execution: .*superseded`, out)
	require.Regexp(t, `complete: jobguard: job is terminal for this execution: .*superseded`, out)
	row := jobs.Read(t, id)
	require.Equal(t, "PROCESSING", row.Status, "the new execution's job is untouched")
	require.Equal(t, next.Generation, row.Generation)
	require.NoError(t, guard.CompleteIfActive(ctx, env.Pool, next))
}
