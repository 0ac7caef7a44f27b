package watch_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/watch"
)

// envWorker, when set, makes the test binary a worker process: a JSON
// workerConfig.
const envWorker = "JOBGUARD_WATCH_CANCEL_WORKER"

// workerConfig is what a worker process is told.
type workerConfig struct {
	DatabaseURL string `json:"database_url"`
	RedisURL    string `json:"redis_url,omitempty"` // notices over Redis; else Postgres
	Prefix      string `json:"prefix"`
	Channel     string `json:"channel"`
	JobID       string `json:"job_id"`
}

// workerReport is what a worker process prints when its context ended.
type workerReport struct {
	CancelledAt int64  `json:"cancelled_at_unix_nano"`
	Cause       string `json:"cause"`
	Cancelled   bool   `json:"cancelled"`
	Via         string `json:"via"`
	Save        string `json:"save"`
	SaveRefused bool   `json:"save_refused"`
}

func TestMain(m *testing.M) {
	if raw := os.Getenv(envWorker); raw != "" {
		os.Exit(workerMain(raw))
	}
	if raw := os.Getenv(envFanoutWorker); raw != "" {
		os.Exit(fanoutMain(raw))
	}
	os.Exit(m.Run())
}

// workerMain is a worker process: it starts the job, watches it, prints
// "started", runs its "external call" (a wait on the watched context)
// and, once the context ended, prints a workerReport after trying to
// save its result.
func workerMain(raw string) int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "worker config:", err)
		return 2
	}
	if err := work(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	return 0
}

func work(cfg workerConfig) error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	// A deployment without Redis keeps its markers in Postgres too.
	shared := jobguard.Shared{Prefix: cfg.Prefix, NoticeChannel: cfg.Channel, Markers: jobguard.MarkersPostgres}
	t := watch.Transport{Postgres: pool}
	var rdb marker.Redis
	if cfg.RedisURL != "" {
		opts, err := redis.ParseURL(cfg.RedisURL)
		if err != nil {
			return err
		}
		client := redis.NewClient(opts)
		defer client.Close()
		rdb, t, shared.Markers = client, watch.Transport{Redis: client}, jobguard.MarkersRedis
	}
	guard, err := jobguard.NewWithConfig(ctx, pool, jobguard.DefaultTable(), jobguard.GuardConfig{Shared: shared})
	if err != nil {
		return err
	}
	w, err := watch.New(watch.Config{Guard: guard, DB: pool, Transport: t, CheckInterval: time.Hour})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = w.Run(runCtx) }()
	for !w.Subscribed() {
		time.Sleep(time.Millisecond)
	}
	starts, err := jobguard.NewStartGuard(guard, rdb, jobguard.StartGuardConfig{})
	if err != nil {
		return err
	}
	exec, err := starts.Start(ctx, pool, cfg.JobID)
	if err != nil {
		return err
	}
	callCtx, release := w.Watch(ctx, exec)
	defer release()
	fmt.Println("started")

	<-callCtx.Done() // the external call, which honours its context
	rep := workerReport{CancelledAt: time.Now().UnixNano(), Cause: fmt.Sprint(context.Cause(callCtx))}
	var lost *watch.LostError
	if errors.As(context.Cause(callCtx), &lost) {
		rep.Cancelled, rep.Via = lost.Cancelled, lost.Via.String()
	}
	save := guard.CompleteIfActive(ctx, pool, exec)
	rep.Save, rep.SaveRefused = fmt.Sprint(save), errors.Is(save, jobguard.ErrJobTerminal)
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// lockedBuffer is a strings.Builder that the copier of a child's stderr
// and the test may use at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startWorker starts a worker process on job id and waits until it has
// started the job and watches it; the returned func waits for its report.
func startWorker(t *testing.T, cfg workerConfig) func() workerReport {
	t.Helper()
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envWorker+"="+string(raw))
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
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			require.True(t, ok, "worker ended before %s: %s", what, stderr.String())
			return l
		case <-time.After(testenv.Patience):
			t.Fatalf("no %s from the worker within %v: %s", what, testenv.Patience, stderr.String())
		}
		return ""
	}
	require.Equal(t, "started", next("its start"))
	return func() workerReport {
		t.Helper()
		var rep workerReport
		l := next("its report")
		require.NoError(t, json.Unmarshal([]byte(l), &rep), l)
		return rep
	}
}

// An operator's cancel stops the running execution of the job in another
// OS process through that process's watcher, on LISTEN/NOTIFY (the
// notice Cancel sends with its commit) and on Redis (what Cancel returned,
// published with PublishCancelled), within the notice's latency; the
// worker's cause says "cancelled", and its save is refused with
// ErrJobTerminal. The latency is measured from just before the cancel to
// the moment the worker's context ended (both clocks are this machine's)
// and logged as min/median/max over a handful of runs; what the test
// checks is that the notice, not the hourly check, cancelled it.
func TestCancel_StopsTheExecutionInAnotherProcessWithinTheNoticeLatency(t *testing.T) {
	t.Parallel()
	const runs = 5
	for _, kind := range transports {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			env := testenv.New(t)
			jobs := fixture.Create(t, env, fixture.Default)
			cfg := workerConfig{DatabaseURL: env.DatabaseURL, Prefix: env.Prefix, Channel: env.Schema}
			var pub *watch.Publisher
			if kind == "redis" {
				cfg.RedisURL = env.RedisURL
				var err error
				pub, err = watch.NewPublisher(jobs.Guard, watch.Transport{Redis: env.Redis})
				require.NoError(t, err)
			}
			ctx := context.Background()
			var took []time.Duration
			for range runs {
				cfg.JobID = jobs.Insert(t, fixture.Job{Status: jobs.Table.Statuses.Queued})
				report := startWorker(t, cfg)

				from := time.Now()
				lost, err := jobs.Guard.Cancel(ctx, env.Pool, cfg.JobID, "stop it")
				require.NoError(t, err)
				if pub != nil {
					require.NoError(t, pub.PublishCancelled(ctx, lost))
				}
				rep := report()
				took = append(took, time.Unix(0, rep.CancelledAt).Sub(from))

				require.Equal(t, "notice", rep.Via, rep.Cause)
				require.True(t, rep.Cancelled, rep.Cause)
				require.Contains(t, rep.Cause, "cancelled by an operator")
				require.True(t, rep.SaveRefused, rep.Save)
				row := jobs.Read(t, cfg.JobID)
				require.Equal(t, jobs.Table.Statuses.Failed, row.Status)
				require.Equal(t, jobguard.CancelledReasonDefault+": stop it", row.Reason)
			}
			slices.Sort(took)
			t.Logf("%s: cancel to the other process's context ending, %d runs: min %v, median %v, max %v",
				kind, runs, took[0], took[runs/2], took[runs-1])
		})
	}
}
