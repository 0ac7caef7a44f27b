package watch_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	jgreclaim "github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/watch"
)

// The fan-out figure runs only when asked: it starts fanoutWorkers OS
// processes and reclaims fanoutJobs jobs.
const (
	envFanout       = "JOBGUARD_FANOUT"
	envFanoutWorker = "JOBGUARD_FANOUT_WORKER"
	// fanoutWorkers and fanoutJobs are the defaults of
	// JOBGUARD_FANOUT_WORKERS and JOBGUARD_FANOUT_JOBS.
	fanoutWorkers = 50
	fanoutJobs    = 10_000
)

// fanoutConfig is what a fan-out worker process is told.
type fanoutConfig struct {
	DatabaseURL string   `json:"database_url"`
	RedisURL    string   `json:"redis_url,omitempty"` // notices over Redis; else Postgres
	Prefix      string   `json:"prefix"`
	Channel     string   `json:"channel"`
	JobIDs      []string `json:"job_ids"` // each running at generation 1
}

// fanoutReport is what a fan-out worker prints once every execution it
// watched was cancelled, or it gave up waiting.
type fanoutReport struct {
	// CancelledAt holds, per execution, when its context ended (Unix
	// nanoseconds, the machine's clock); 0 for one that never did.
	CancelledAt []int64        `json:"cancelled_at"`
	Via         map[string]int `json:"via"`
}

// fanoutMain is a fan-out worker process: it subscribes, watches every
// execution of its jobs, prints "ready", and once each execution's
// context has ended (or after testenv.Patience) prints a fanoutReport.
func fanoutMain(raw string) int {
	var cfg fanoutConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "fan-out worker config:", err)
		return 2
	}
	if err := fanoutWork(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "fan-out worker:", err)
		return 1
	}
	return 0
}

func fanoutWork(cfg fanoutConfig) error {
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return err
	}
	// The guard's catalog read, then the listening session, which takes
	// that connection out of the pool: one connection per process.
	pc.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return err
	}
	defer pool.Close()
	shared := jobguard.Shared{Prefix: cfg.Prefix, NoticeChannel: cfg.Channel, Markers: jobguard.MarkersPostgres}
	t := watch.Transport{Postgres: pool}
	if cfg.RedisURL != "" {
		opts, err := redis.ParseURL(cfg.RedisURL)
		if err != nil {
			return err
		}
		client := redis.NewClient(opts)
		defer client.Close()
		t, shared.Markers = watch.Transport{Redis: client}, jobguard.MarkersRedis
	}
	guard, err := jobguard.NewWithConfig(ctx, pool, jobguard.DefaultTable(), jobguard.GuardConfig{Shared: shared})
	if err != nil {
		return err
	}
	// A worker logs each cancelled execution, as a deployed one does.
	w, err := watch.New(watch.Config{Guard: guard, DB: pool, Transport: t, CheckInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = w.Run(runCtx) }()
	<-w.Ready()

	rep := fanoutReport{CancelledAt: make([]int64, len(cfg.JobIDs)), Via: map[string]int{}}
	var mu sync.Mutex
	var left sync.WaitGroup
	for i, id := range cfg.JobIDs {
		wctx, release := w.Watch(ctx, jobguard.Execution{JobID: id, Generation: 1})
		defer release()
		left.Add(1)
		context.AfterFunc(wctx, func() {
			at := time.Now().UnixNano()
			via := "other"
			var lost *watch.LostError
			if errors.As(context.Cause(wctx), &lost) {
				via = lost.Via.String()
			}
			mu.Lock()
			rep.CancelledAt[i] = at
			rep.Via[via]++
			mu.Unlock()
			left.Done()
		})
	}
	fmt.Println("ready")
	all := make(chan struct{})
	go func() { left.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(testenv.Patience):
	}
	mu.Lock()
	defer mu.Unlock()
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// startFanoutWorker starts a fan-out worker and returns a func that waits
// until it is ready, and one that waits for its report.
func startFanoutWorker(t *testing.T, cfg fanoutConfig) (ready func(), report func() fanoutReport) {
	t.Helper()
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envFanoutWorker+"="+string(raw))
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	lines := make(chan string, 2)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			require.True(t, ok, "fan-out worker ended before %s: %.2000s", what, stderr.String())
			return l
		case <-time.After(testenv.Patience):
			t.Fatalf("no %s from a fan-out worker within %v: %.2000s", what, testenv.Patience, stderr.String())
		}
		return ""
	}
	return func() {
			t.Helper()
			require.Equal(t, "ready", next("its readiness"))
		}, func() fanoutReport {
			t.Helper()
			var rep fanoutReport
			l := next("its report")
			require.NoError(t, json.Unmarshal([]byte(l), &rep), "%.200s", l)
			return rep
		}
}

// commitClock notes when the reclaim's conditional write returned: without
// parent rules and with the markers in Redis, that one statement is the
// reclaim's transaction, so its end is the commit as the reclaimer heard it.
type commitClock struct{ at atomic.Int64 }

type failWrite struct{}

func (c *commitClock) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "SKIP LOCKED") {
		return context.WithValue(ctx, failWrite{}, true)
	}
	return ctx
}

func (c *commitClock) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	if ctx.Value(failWrite{}) != nil && data.Err == nil {
		c.at.Store(time.Now().UnixNano())
	}
}

// timedNotifier notes when the sweep's Publish began and returned.
type timedNotifier struct {
	pub        *watch.Publisher
	start, end atomic.Int64
	notices    atomic.Int64
}

func (n *timedNotifier) Publish(ctx context.Context, execs ...jobguard.Execution) error {
	n.start.CompareAndSwap(0, time.Now().UnixNano())
	n.notices.Add(int64(len(execs)))
	err := n.pub.Publish(ctx, execs...)
	n.end.Store(time.Now().UnixNano())
	return err
}

// fanoutSize reads a positive count from the environment, or def.
func fanoutSize(t *testing.T, name string, def int) int {
	t.Helper()
	raw := os.Getenv(name)
	if raw == "" {
		return def
	}
	n, err := strconv.Atoi(raw)
	require.NoError(t, err, name)
	require.Positive(t, n, name)
	return n
}

// The fan-out figure: fanoutWorkers worker processes watch fanoutJobs
// running executions between them, and one sweep reclaims every job; the
// time from the reclaim's commit to each execution's context ending, in
// its own process, is reported as p50, p99 and max per transport. What
// the test requires is only that every execution was cancelled by its
// notice (the watchers' check runs hourly); the figures are logged, never
// asserted.
//
//	JOBGUARD_FANOUT=1 go test ./watch/ -run TestFanout -count=1 -v -timeout 30m
func TestFanout_ReclaimCancelsEveryLostExecution(t *testing.T) {
	if os.Getenv(envFanout) == "" {
		t.Skipf("set %s=1 to run the fan-out figure (%d processes, %d jobs)", envFanout, fanoutWorkers, fanoutJobs)
	}
	workers := fanoutSize(t, "JOBGUARD_FANOUT_WORKERS", fanoutWorkers)
	total := fanoutSize(t, "JOBGUARD_FANOUT_JOBS", fanoutJobs)
	for _, kind := range transports {
		t.Run(kind, func(t *testing.T) { fanout(t, kind, workers, total) })
	}
}

func fanout(t *testing.T, kind string, workers, total int) {
	ctx := context.Background()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	rows, err := env.Pool.Query(ctx, `INSERT INTO jobs (type, status, generation, started_at, updated_at)
		SELECT 'chapter', 'PROCESSING', 1, now() - interval '2 hours', now() - interval '2 hours'
		FROM generate_series(1, $1) RETURNING id::text`, total)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)

	cfg := fanoutConfig{DatabaseURL: env.DatabaseURL, Prefix: env.Prefix, Channel: env.Schema}
	tr := watch.Transport{Postgres: env.Pool}
	if kind == "redis" {
		cfg.RedisURL, tr = env.RedisURL, watch.Transport{Redis: env.Redis}
	}
	reports := make([]func() fanoutReport, workers)
	readies := make([]func(), workers)
	for i := range workers {
		c := cfg
		c.JobIDs = ids[i*total/workers : (i+1)*total/workers]
		readies[i], reports[i] = startFanoutWorker(t, c)
	}
	for _, ready := range readies {
		ready()
	}

	clock := &commitClock{}
	pc, err := pgxpool.ParseConfig(env.DatabaseURL)
	require.NoError(t, err)
	pc.ConnConfig.Tracer = clock
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	pub, err := watch.NewPublisher(jobs.Guard, tr)
	require.NoError(t, err)
	notes := &timedNotifier{pub: pub}
	logs := &testenv.Logs{}
	r, err := jgreclaim.New(jgreclaim.Config{Guard: jobs.Guard, DB: pool, Redis: env.Redis, Notices: notes,
		Limits: jgreclaim.StaticLimits{"chapter": 30 * time.Minute}, SweepTimeout: 5 * time.Minute, Logger: logs.Logger()})
	require.NoError(t, err)
	r.ReleaseBrake() // one sweep reclaims them all, as a deliberate mass reclaim does
	rep, err := r.Sweep(ctx)
	swept := time.Now().UnixNano()
	require.NoError(t, err, logs.String())
	require.Equal(t, total, rep.Reclaimed, logs.String())
	require.Zero(t, rep.NoticeErrors, logs.String())
	commit := clock.at.Load()
	require.NotZero(t, commit)

	var took []time.Duration
	via := map[string]int{}
	for _, report := range reports {
		wr := report()
		for _, at := range wr.CancelledAt {
			require.NotZero(t, at, "an execution was never cancelled")
			took = append(took, time.Duration(at-commit))
		}
		for k, n := range wr.Via {
			via[k] += n
		}
	}
	require.Len(t, took, total)
	require.Equal(t, map[string]int{"notice": total}, via, "every execution is cancelled by its notice")
	slices.Sort(took)
	pct := func(p float64) time.Duration { return took[min(len(took)-1, int(p*float64(len(took))))] }
	t.Logf("fan-out %s: %d processes, %d executions; commit to cancel: p50 %v, p99 %v, max %v (min %v); "+
		"Publish began %v and returned %v after the commit (%d notices), the sweep returned %v after it",
		kind, workers, total, pct(0.50).Round(time.Millisecond), pct(0.99).Round(time.Millisecond),
		took[len(took)-1].Round(time.Millisecond), took[0].Round(time.Millisecond),
		time.Duration(notes.start.Load()-commit).Round(time.Millisecond),
		time.Duration(notes.end.Load()-commit).Round(time.Millisecond), notes.notices.Load(),
		time.Duration(swept-commit).Round(time.Millisecond))
}
