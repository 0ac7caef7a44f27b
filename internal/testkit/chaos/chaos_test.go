package chaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/chaos"
	"github.com/jobguard/jobguard/internal/testkit/history"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/lease"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
	"github.com/jobguard/jobguard/watch"
)

// Environment variables of the run.
const (
	envSeed    = "JOBGUARD_CHAOS_SEED"    // replay a run: the seed it printed
	envJobs    = "JOBGUARD_CHAOS_JOBS"    // jobs per wave; defaults to 2000
	envSoak    = "JOBGUARD_CHAOS_SOAK"    // keep adding waves for this long ("4m"); defaults to one wave
	envWorkers = "JOBGUARD_CHAOS_WORKERS" // worker processes; defaults to 3
	envWorker  = "JOBGUARD_CHAOS_WORKER"  // set in a worker process: its JSON config
)

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{}) // the outages are on purpose; their dial errors are counted, not printed
	if cfg := os.Getenv(envWorker); cfg != "" {
		os.Exit(workerMain(cfg))
	}
	os.Exit(m.Run())
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// workerMain is the body of a worker process: it processes jobs until
// SIGTERM (or dies of SIGKILL).
func workerMain(raw string) int {
	var cfg chaos.WorkerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "worker config:", err)
		return 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := chaos.RunWorker(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// workerProc is one incarnation of a worker process.
type workerProc struct {
	cmd         *exec.Cmd
	app         string
	incarnation int
	exited      chan struct{}
	// taken is set by whoever ends the process's life in its slot: the
	// killer (a kill, a stop), the supervisor (it exited on its own) or
	// the run's end. Only the one that set it replaces it.
	taken atomic.Bool
}

// run is the driver's state.
type run struct {
	t    *testing.T
	seed uint64
	env  *testenv.Env
	pool *pgxpool.Pool
	// redis is the run's private Redis; nil in a Postgres-only run, whose
	// redisAddr is a closed port.
	redis     *chaos.RedisServer
	rdb       *redis.Client
	redisAddr string
	mode      mode
	guard     *jobguard.Guard
	timing    chaos.Timing
	dir       string
	appName   string
	prefix    string
	jobs      int

	mu          sync.Mutex
	workers     []*workerProc
	incarnation int
	reported    chaos.Reported
	sweepErrs   []string
	settled     settle.Report // the settle sweeps' reports, summed
	settleErrs  []string

	killed, killedMidTx, outages, terminated, retries, sweeps atomic.Int64
	listenersTerminated, reclaimersTerminated                 atomic.Int64
	enqueued                                                  atomic.Int64
	// stopped counts workers stopped past their lease and continued;
	// respawned, workers that exited on their own (their lease lost) and
	// were replaced; cancels, cancelRetries the operator's.
	stopped, respawned, cancels, cancelRetries atomic.Int64
	// closing is set when the run stops its workers: none is replaced.
	closing atomic.Bool
}

// mode is what a run keeps its markers and notices in.
type mode struct {
	// name says it in the run's table and messages.
	name string
	// postgresOnly keeps the markers in the marker table and sends the
	// notices with LISTEN/NOTIFY; no process has a Redis client, and the
	// Redis outages give way to terminated listening and reclaimer
	// sessions. Otherwise the markers are in a private Redis, which the
	// run stops and starts.
	postgresOnly bool
	// jobs is the number of jobs per wave when JOBGUARD_CHAOS_JOBS is not
	// set, and exercised the number from which the run requires that
	// every fault happened.
	jobs, exercised int
}

var (
	modeRedis        = mode{name: "redis markers", jobs: 2000, exercised: 1000}
	modePostgresOnly = mode{name: "postgres only", postgresOnly: true, jobs: 1000, exercised: 1000}
)

// stallWindow is how long the run waits for a job to leave the queue (or a
// pending record to settle) before it calls the run stuck. The run has no
// budget for its whole length: a loaded machine makes it slower, never
// failed. Only a run that stops moving fails.
const stallWindow = 2 * time.Minute

// TestChaos is the run with the markers in a private Redis that the run
// stops and starts.
func TestChaos(t *testing.T) { runChaos(t, modeRedis) }

// TestChaos_PostgresOnly is a shorter run with no Redis reachable at all:
// markers in the marker table, notices over LISTEN/NOTIFY cancelling the
// calls of reclaimed executions, every process built with a nil Redis
// client, and the Redis URL pointing at a closed port. Its faults are the
// database's: besides the kills and the terminated worker transactions,
// the listening sessions and the reclaimers' sessions are terminated.
func TestChaos_PostgresOnly(t *testing.T) { runChaos(t, modePostgresOnly) }

// runChaos is one run: it starts the workers, the reclaimers, the settle
// sweeps and the faults, waits until the queue is drained, settles and
// checks.
func runChaos(t *testing.T, m mode) {
	seed := rand.Uint64()
	if s := os.Getenv(envSeed); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, envSeed)
	}
	jobs := envInt(t, envJobs, m.jobs)
	workers := envInt(t, envWorkers, 3)
	var soak time.Duration
	if s := os.Getenv(envSoak); s != "" {
		var err error
		soak, err = time.ParseDuration(s)
		require.NoError(t, err, envSoak)
	}
	t.Logf("chaos (%s) seed %d (replay: %s=%d go test ./internal/testkit/chaos/ -run '%s$' -v)", m.name, seed, envSeed, seed, t.Name())

	r := newRun(t, m, seed, jobs)
	waves := 1
	r.enqueue(rand.New(rand.NewPCG(seed, 0)), jobs)
	for range workers {
		require.NoError(t, r.startWorker(len(r.workers)))
	}
	t.Cleanup(r.stopWorkers)

	chaosCtx, stopChaos := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	rec1, hist1 := r.newReclaimer(1)
	rec2, hist2 := r.newReclaimer(2)
	wg.Go(func() { r.reclaimer(chaosCtx, 1, rec1, hist1) })
	wg.Go(func() { r.reclaimer(chaosCtx, 2, rec2, hist2) })
	set1, shist1 := r.newSettler(1)
	set2, shist2 := r.newSettler(2)
	wg.Go(func() { r.settler(chaosCtx, 1, set1, shist1) })
	wg.Go(func() { r.settler(chaosCtx, 2, set2, shist2) })
	wg.Go(func() { r.killer(chaosCtx, workers) })
	wg.Go(func() { r.terminator(chaosCtx) })
	if m.postgresOnly {
		wg.Go(func() { r.sessionFaults(chaosCtx) })
	} else {
		wg.Go(func() { r.redisOutages(chaosCtx) })
	}
	wg.Go(func() { r.operator(chaosCtx) })
	superviseCtx, stopSupervising := context.WithCancel(context.Background())
	defer stopSupervising()
	go r.supervise(superviseCtx)

	start := time.Now()
	moved := newProgress(r.finished())
	for {
		time.Sleep(200 * time.Millisecond)
		left := r.queued()
		if soak > 0 && time.Since(start) < soak && left < jobs/4 {
			waves++
			r.enqueue(rand.New(rand.NewPCG(seed, uint64(waves))), jobs)
			continue
		}
		if left == 0 {
			break
		}
		if moved.stalled(r.finished()) {
			stopChaos()
			wg.Wait()
			r.stopWorkers()
			t.Fatalf("seed %d: no job left the queue for %v; %d jobs still queued\n%s", seed, stallWindow, left, r.workerLogs())
		}
	}
	stopChaos()
	wg.Wait()
	if r.redis != nil && !r.redis.Running() {
		require.NoError(t, r.redis.Start())
	}
	// A job may have been re-queued by the last moves of the chaos (a
	// released save, a retry): drain it before stopping the workers.
	moved = newProgress(r.finished())
	for r.queued() > 0 {
		if moved.stalled(r.finished()) {
			r.stopWorkers()
			t.Fatalf("seed %d: %d jobs still queued %v after the chaos stopped\n%s", seed, r.queued(), stallWindow, r.workerLogs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.stopWorkers()
	// Settle: what the killed workers and the failed updates left, the
	// sweeps finish; each record is settled or given up.
	r.settleAll(set1, shist1)
	r.judge(waves*jobs, time.Since(start))
}

// newRun prepares the run's schema, its Redis (or the closed port that
// stands for none) and the driver's guard.
func newRun(t *testing.T, m mode, seed uint64, jobs int) *run {
	env := testenv.New(t, testenv.Config{MaxConns: 12})
	r := &run{
		t: t, seed: seed, env: env, pool: env.Pool, mode: m,
		timing: chaos.TimingDefault, dir: t.TempDir(), appName: "chaos-" + env.Schema, prefix: env.Prefix, jobs: jobs,
		reported: chaos.Reported{MarkerUnsure: map[string]bool{}},
	}
	migrations := []string{jobguard.Migration, lease.Migration, usage.Migration, settle.Migration, chaos.Schema}
	markers := jobguard.MarkersRedis
	if m.postgresOnly {
		migrations = append(migrations, marker.Migration)
		markers = jobguard.MarkersPostgres
		r.redisAddr = closedPort(t)
	} else {
		rs, err := chaos.StartRedis(r.dir)
		require.NoError(t, err)
		t.Cleanup(func() { _ = rs.Stop() })
		r.redis, r.redisAddr = rs, rs.Addr
		r.rdb = redis.NewClient(&redis.Options{Addr: rs.Addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
		t.Cleanup(func() { _ = r.rdb.Close() })
	}
	for _, sql := range migrations {
		env.Exec(sql)
	}
	var err error
	r.guard, err = jobguard.NewWithConfig(context.Background(), env.Pool, jobguard.DefaultTable(),
		jobguard.GuardConfig{Shared: jobguard.Shared{Prefix: env.Prefix, Markers: markers}})
	require.NoError(t, err)
	r.seedAccounts()
	return r
}

// closedPort returns host:port of a port nothing listens on: a Redis
// client pointed there fails at once, loudly.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// judge runs both judges, the invariant queries and the history checker,
// prints the run's table and fails on what either finds.
func (r *run) judge(jobs int, elapsed time.Duration) {
	t, seed, ctx := r.t, r.seed, context.Background()
	r.mu.Lock()
	rep := r.reported
	r.mu.Unlock()
	violations, err := chaos.Check(ctx, r.pool, r.rdb, r.prefix, rep)
	require.NoError(t, err)
	events, final, err := history.Load(ctx, r.pool, chaos.FinalState)
	require.NoError(t, err)
	judged, stats := history.Check(events, final, history.Rules{Limit: r.timing.Limit, NoProgress: r.timing.NoProgress})
	t.Log("\n" + r.table(jobs, elapsed, len(violations), stats, len(judged)))
	for i, e := range r.sweepErrs {
		if i == 5 {
			break
		}
		t.Logf("sweep error: %s", e)
	}
	for i, e := range r.settleErrs {
		if i == 5 {
			break
		}
		t.Logf("settle sweep error: %s", e)
	}
	if r.jobs >= r.mode.exercised {
		r.requireExercised()
	}
	if len(judged) > 0 {
		var all strings.Builder
		for _, v := range judged {
			fmt.Fprintf(&all, "%s\n", v)
		}
		t.Errorf("seed %d: the history checker found %d violations:\n%s(replay: %s=%d)", seed, len(judged), all.String(), envSeed, seed)
	}
	if len(violations) > 0 {
		var others strings.Builder
		for _, v := range violations[1:] {
			fmt.Fprintf(&others, "  invariant %d: %s (%d rows)\n", v.Invariant, v.What, v.Count)
		}
		t.Fatalf("seed %d: %d invariant violations; first:\n%s\nothers:\n%s(replay: %s=%d)\nworker logs:\n%s",
			seed, len(violations), violations[0], others.String(), envSeed, seed, r.workerLogs())
	}
}

// requireExercised fails the run if one of its faults never happened: a
// run that reclaimed nothing or killed nothing proves nothing.
func (r *run) requireExercised() {
	ctx := context.Background()
	var reclaims, late, refusals, stale int
	require.NoError(r.t, r.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM job_audit WHERE actor = 'reclaim'),
		(SELECT count(*) FROM events WHERE kind = $1),
		(SELECT count(*) FROM events WHERE kind = $2),
		(SELECT count(*) FROM events WHERE kind = $3)`,
		chaos.EventLateRejected, chaos.EventStartRefused, chaos.EventStaleRefused).Scan(&reclaims, &late, &refusals, &stale))
	var killedAfter, rescuedKilled, comebackRefused int
	require.NoError(r.t, r.pool.QueryRow(ctx, chaos.KilledAfterCompletion).Scan(&killedAfter))
	require.NoError(r.t, r.pool.QueryRow(ctx, `SELECT (`+rescuedFrom("kills")+`), (`+comebackRefusals+`)`).Scan(
		&rescuedKilled, &comebackRefused))
	required := map[string]int64{
		"reclaims": int64(reclaims), "late completions rejected": int64(late), "start refusals": int64(refusals),
		"killed workers": r.killed.Load(), "terminated connections": r.terminated.Load(),
		"operator retries":                  r.retries.Load(),
		"rescues of a killed worker's jobs": int64(rescuedKilled), "operator cancels": r.cancels.Load(),
		"retries of cancelled jobs": r.cancelRetries.Load(), "workers stopped past their lease and continued": r.stopped.Load(),
		"writes of a continued worker refused": int64(comebackRefused),
	}
	if r.mode.postgresOnly {
		// A shorter run: its own faults and what only it does, the calls
		// cancelled by a notice.
		var cancelled int
		require.NoError(r.t, r.pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE kind = $1 AND detail = 'notice'`,
			chaos.EventCancelled).Scan(&cancelled))
		required["calls cancelled by a reclaim notice"] = int64(cancelled)
		required["listening sessions terminated"] = r.listenersTerminated.Load()
		required["reclaimer sessions terminated"] = r.reclaimersTerminated.Load()
	} else {
		required["stale-generation writes refused"] = int64(stale)
		required["Redis outages"] = r.outages.Load()
		required["finalize records settled by a sweep"] = int64(r.settled.Settled)
		required["finalize records given up"] = int64(r.settled.GivenUp)
		required["workers killed between a completion and its billing"] = int64(killedAfter)
	}
	for what, n := range required {
		if n == 0 {
			r.t.Errorf("seed %d: the run had no %s", r.seed, what)
		}
	}
}

// rescuedFrom counts the rescues of the jobs of the worker incarnations
// in table (kills, stops).
func rescuedFrom(table string) string {
	return `SELECT count(*) FROM job_audit WHERE actor = 'rescue' AND old_owner IN (SELECT 'w' || incarnation FROM ` + table + `)`
}

// comebackRefusals counts the refusals that the executions of a worker
// stopped past its lease met once continued: heartbeats and saves.
const comebackRefusals = `SELECT count(*) FROM events e JOIN stops s ON s.incarnation = e.incarnation
	WHERE e.at > s.continued_at AND e.kind IN ('heartbeat_lost', 'stale_refused', 'late_rejected', 'other_rejected')`

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	require.NoError(t, err, name)
	require.Positive(t, n, name)
	return n
}

// record writes a history event for the driver's goroutines, retrying
// while a connection is being terminated.
func (r *run) record(sql string, args ...any) {
	var err error
	for range 20 {
		if _, err = r.pool.Exec(context.Background(), sql, args...); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Errorf("record history: %v", err)
}

func (r *run) exec(sql string, args ...any) {
	r.t.Helper()
	_, err := r.pool.Exec(context.Background(), sql, args...)
	require.NoError(r.t, err, sql)
}

func (r *run) seedAccounts() {
	for i := range chaos.Accounts {
		r.exec(`INSERT INTO accounts (id) VALUES ($1)`, "acct-"+strconv.Itoa(i))
	}
}

// enqueue creates n jobs, their parents and their queue rows, each job with
// its plan drawn from rng.
func (r *run) enqueue(rng *rand.Rand, n int) {
	var ids, kinds, parents, payloads []string
	for range n {
		kind := chaos.KindChapter
		if rng.Float64() < 0.4 {
			kind = chaos.KindVideo
		}
		p, err := json.Marshal(chaos.NewPlan(rng, kind, r.timing))
		require.NoError(r.t, err)
		id := uuid.UUID(randomBytes(rng)).String()
		ids, kinds, parents, payloads = append(ids, id), append(kinds, kind), append(parents, kind+"-"+id[:13]), append(payloads, string(p))
	}
	r.exec(`INSERT INTO jobs (id, type, parent_id, payload)
		SELECT i::uuid, k, p, d::jsonb FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS x(i, k, p, d)`,
		ids, kinds, parents, payloads)
	r.exec(`INSERT INTO courses (id) SELECT p FROM unnest($1::text[], $2::text[]) AS x(p, k) WHERE k = 'chapter'`, parents, kinds)
	r.exec(`INSERT INTO videos (id, account) SELECT p, d::jsonb->>'account' FROM unnest($1::text[], $2::text[], $3::text[]) AS x(p, k, d)
		WHERE k = 'video'`, parents, kinds, payloads)
	r.exec(`INSERT INTO queue (job_id) SELECT i::uuid FROM unnest($1::text[]) AS i`, ids)
	r.enqueued.Add(int64(n))
}

func randomBytes(rng *rand.Rand) [16]byte {
	var b [16]byte
	for i := range 2 {
		v := rng.Uint64()
		for j := range 8 {
			b[i*8+j] = byte(v >> (8 * j))
		}
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return b
}

func (r *run) queued() int {
	var n int
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.pool.QueryRow(ctx, `SELECT count(*) FROM queue`).Scan(&n); err != nil {
		return -1
	}
	return n
}

// startWorker starts a new incarnation in worker slot i. It runs on the
// test's goroutine and on the killer's, so it returns its error.
func (r *run) startWorker(slot int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.incarnation++
	w := &workerProc{incarnation: r.incarnation, app: r.appName + "-w" + strconv.Itoa(r.incarnation), exited: make(chan struct{})}
	cfg, err := json.Marshal(chaos.WorkerConfig{
		DatabaseURL: r.env.DatabaseURL, RedisAddr: r.redisAddr, PostgresOnly: r.mode.postgresOnly, Prefix: r.prefix,
		Incarnation: w.incarnation, Concurrency: 4, AppName: w.app, Timing: r.timing,
	})
	if err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(r.dir, fmt.Sprintf("worker-%03d.log", w.incarnation)))
	if err != nil {
		return err
	}
	w.cmd = exec.Command(os.Args[0], "-test.run=^$")
	w.cmd.Env = append(os.Environ(), envWorker+"="+string(cfg))
	if r.mode.postgresOnly {
		// Nothing in a worker may reach for Redis; if something did, it
		// would meet a closed port.
		w.cmd.Env = append(w.cmd.Env, "JOBGUARD_REDIS_URL=redis://"+r.redisAddr+"/0")
	}
	w.cmd.Stdout, w.cmd.Stderr = logf, logf
	w.cmd.SysProcAttr = chaos.ProcAttr(syscall.SIGKILL) // no orphan if the run dies
	if err := w.cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start worker %d: %w", w.incarnation, err)
	}
	go func() {
		_ = w.cmd.Wait()
		_ = logf.Close()
		close(w.exited)
	}()
	if slot == len(r.workers) {
		r.workers = append(r.workers, w)
	} else {
		r.workers[slot] = w
	}
	return nil
}

// stopWorkers asks every worker to stop and waits for it, killing those
// that do not stop within ten seconds.
func (r *run) stopWorkers() {
	r.closing.Store(true)
	r.mu.Lock()
	ws := append([]*workerProc(nil), r.workers...)
	r.mu.Unlock()
	for _, w := range ws {
		w.taken.Store(true)
		_ = w.cmd.Process.Signal(syscall.SIGCONT) // a stopped one must hear the SIGTERM
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range ws {
		select {
		case <-w.exited:
		case <-time.After(10 * time.Second):
			_ = w.cmd.Process.Kill()
			<-w.exited
			chaos.Crashed(r.record, chaos.WorkerProcess(w.incarnation))
		}
	}
}

// workerLogs returns what the workers and reclaimers logged, without the
// expected fail-open warnings of the Redis outages.
func (r *run) workerLogs() string {
	files, _ := filepath.Glob(filepath.Join(r.dir, "*.log"))
	var b strings.Builder
	for _, f := range files {
		data, _ := os.ReadFile(f)
		var keep []string
		for _, line := range strings.Split(string(data), "\n") {
			if line != "" && !strings.Contains(line, "start guard lookup failed") && !strings.Contains(line, "connection refused") {
				keep = append(keep, line)
			}
		}
		if len(keep) == 0 || strings.HasSuffix(f, "redis.log") {
			continue
		}
		fmt.Fprintf(&b, "== %s\n%s\n", filepath.Base(f), strings.Join(keep[max(0, len(keep)-10):], "\n"))
	}
	return b.String()
}

// every calls fn at random intervals in [lo, hi) until ctx ends.
func every(ctx context.Context, rng *rand.Rand, lo, hi time.Duration, fn func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(lo + time.Duration(rng.Int64N(int64(hi-lo)))):
		}
		fn()
	}
}

// newReclaimer builds one of the two reclaimers: real short limits, its
// own pool and Redis client, parent rules that name their writes.
func (r *run) newReclaimer(n int) (*reclaim.Reclaimer, *chaos.Recorder) {
	t := r.t
	rec := chaos.NewRecorder("reclaimer-"+strconv.Itoa(n), r.record)
	// The rescue is one statement of the library's: the session names its
	// writer, and the audit trigger its history event; a reclaim's parent
	// rule names its own transaction's.
	pool := r.env.Connect(testenv.Config{MaxConns: 2, AppName: fmt.Sprintf("%s-reclaimer-%d", r.appName, n),
		Settings: map[string]string{"chaos.actor": "rescue", "chaos.process": rec.Process}})
	logf, err := os.Create(filepath.Join(r.dir, fmt.Sprintf("reclaimer-%d.log", n)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = logf.Close() })
	// Markers in Redis need a client; in the marker table, the reclaim's
	// own transaction writes them, and the notices go out with NOTIFY.
	var rdb marker.Redis
	var notices reclaim.Notifier
	if r.mode.postgresOnly {
		pub, err := watch.NewPublisher(r.guard, watch.Transport{Postgres: pool})
		require.NoError(t, err)
		notices = pub
	} else {
		client := redis.NewClient(&redis.Options{Addr: r.redisAddr, DialTimeout: 200 * time.Millisecond,
			ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, MaxRetries: -1})
		t.Cleanup(func() { _ = client.Close() })
		rdb = client
	}
	rule := func(parent string) reclaim.ParentRule {
		set, err := reclaim.SetParent(reclaim.ParentUpdate{Table: parent, Column: "status", Value: "FAILED", From: []string{"GENERATING", "ENCODING"}})
		require.NoError(t, err)
		return func(ctx context.Context, tx pgx.Tx, jobs []jobset.Job) error {
			if _, err := tx.Exec(ctx, `SELECT set_config('chaos.actor', 'reclaim', true)`); err != nil {
				return err
			}
			// The reclaims of the page are in this transaction: so is
			// their history.
			for _, j := range jobs {
				if err := rec.OK(ctx, tx, 0, history.OpReclaim, j.ID, j.Generation, ""); err != nil {
					return err
				}
			}
			return set(ctx, tx, jobs)
		}
	}
	recl, err := reclaim.New(reclaim.Config{
		Guard: r.guard, DB: pool, Redis: rdb, Notices: notices,
		Limits:     reclaim.StaticLimits{chaos.KindChapter: r.timing.Limit, chaos.KindVideo: r.timing.Limit},
		NoProgress: r.timing.NoProgress,
		// The second reclaimer runs on a machine whose clock is two
		// seconds ahead: the run's decisions must not depend on it.
		Now:       clock(n),
		OnReclaim: map[string]reclaim.ParentRule{chaos.KindChapter: rule("courses"), chaos.KindVideo: rule("videos")},
		// The rescue: a running job whose worker's lease lapsed goes back
		// to QUEUED under a new generation, before its limit.
		Workers: &lease.Workers{},
		Logger:  slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	require.NoError(t, err)
	return recl, rec
}

// clock is reclaimer n's clock: the second one's runs ahead.
func clock(n int) func() time.Time {
	if n == 2 {
		return func() time.Time { return time.Now().Add(2 * time.Second) }
	}
	return time.Now
}

// reclaimer sweeps every 20-80ms until ctx ends, beside the other one.
func (r *run) reclaimer(ctx context.Context, n int, rec *reclaim.Reclaimer, hist *chaos.Recorder) {
	every(ctx, rand.New(rand.NewPCG(r.seed, 100+uint64(n))), 20*time.Millisecond, 80*time.Millisecond, func() {
		rep, err := rec.Sweep(ctx)
		if rep.Reclaimed+rep.Rescued+rep.LostRace+rep.Locked+rep.RuleErrors+rep.MarkerErrors > 0 || err != nil {
			hist.Sweep(map[string]int{"reclaimed": rep.Reclaimed, "rescued": rep.Rescued, "lost_race": rep.LostRace,
				"locked": rep.Locked, "rule_errors": rep.RuleErrors, "marker_errors": rep.MarkerErrors}, err)
		}
		if ctx.Err() != nil {
			return // the run is over; a sweep cut short is not an error of the sweep
		}
		r.sweeps.Add(1)
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil {
			r.reported.SweepErrors++
			r.sweepErrs = append(r.sweepErrs, err.Error())
			return
		}
		r.reported.Reclaimed += rep.Reclaimed
		r.reported.Rescued += rep.Rescued
		r.reported.LostRace += rep.LostRace
		r.reported.MarkerErrors += rep.MarkerErrors
		if rep.MarkerErrors > 0 {
			for _, id := range rep.ReclaimedIDs {
				r.reported.MarkerUnsure[id] = true
			}
		}
	})
}

// newSettler builds one of the two settle sweepers, on its own pool.
func (r *run) newSettler(n int) (*settle.Settler, *chaos.Recorder) {
	t := r.t
	rec := chaos.NewRecorder("settler-"+strconv.Itoa(n), r.record)
	pool := r.env.Connect(testenv.Config{MaxConns: 3})
	logf, err := os.Create(filepath.Join(r.dir, fmt.Sprintf("settler-%d.log", n)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = logf.Close() })
	s, err := chaos.NewSettler(context.Background(), r.guard, pool, r.timing, false, rec,
		slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelWarn})))
	require.NoError(t, err)
	return s, rec
}

// settler sweeps every 20-80ms until ctx ends, beside the other one and
// the reclaimers.
func (r *run) settler(ctx context.Context, n int, s *settle.Settler, hist *chaos.Recorder) {
	every(ctx, rand.New(rand.NewPCG(r.seed, 600+uint64(n))), 20*time.Millisecond, 80*time.Millisecond, func() {
		rep, err := s.Sweep(ctx)
		if ctx.Err() != nil {
			rep.Taken = 0 // the run is over; a sweep cut short is not an error of the sweep
			err = nil
		}
		r.addSettled(hist, rep, err)
	})
}

// addSettled adds a settle sweep's report to the run's, and to the
// history when it did anything.
func (r *run) addSettled(hist *chaos.Recorder, rep settle.Report, err error) {
	if rep.Taken > 0 || err != nil {
		hist.Sweep(map[string]int{"taken": rep.Taken, "settled": rep.Settled, "raced": rep.Raced, "retrying": rep.Retrying,
			"given_up": rep.GivenUp, "accrued": rep.Accrued}, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.settleErrs = append(r.settleErrs, err.Error())
	}
	r.settled.Taken += rep.Taken
	r.settled.Settled += rep.Settled
	r.settled.Raced += rep.Raced
	r.settled.Retrying += rep.Retrying
	r.settled.GivenUp += rep.GivenUp
	r.settled.Accrued += rep.Accrued
}

// settleAll sweeps until no finalize record is pending, waiting out their
// grace and backoffs, for as long as records keep settling.
func (r *run) settleAll(s *settle.Settler, hist *chaos.Recorder) {
	ctx := context.Background()
	pending := func() int {
		var n int
		require.NoError(r.t, r.pool.QueryRow(ctx, `SELECT count(*) FROM job_settlements WHERE state = 'pending'`).Scan(&n))
		return n
	}
	moved := newProgress(-pending())
	for {
		rep, err := s.Sweep(ctx)
		r.addSettled(hist, rep, err)
		n := pending()
		if n == 0 {
			return
		}
		if moved.stalled(-n) {
			r.t.Fatalf("seed %d: %d finalize records still pending, none settled for %v", r.seed, n, stallWindow)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// progress tells a run that moves slowly from one that stopped: it is
// stalled once its count has not grown for stallWindow.
type progress struct {
	best  int
	since time.Time
}

func newProgress(n int) *progress { return &progress{best: n, since: time.Now()} }

func (p *progress) stalled(n int) bool {
	if n > p.best {
		p.best, p.since = n, time.Now()
	}
	return time.Since(p.since) > stallWindow
}

// finished is how many of the enqueued jobs have left the queue, or -1 if
// the queue cannot be read.
func (r *run) finished() int {
	left := r.queued()
	if left < 0 {
		return -1
	}
	return int(r.enqueued.Load()) - left
}

// paced runs fn like every, and also waits until at least jobs more jobs
// have left the queue since its last run. A fault that costs the workers
// time (a kill, an outage) then comes as often on a loaded machine as on a
// quiet one relative to the work done, so it cannot starve the run.
func (r *run) paced(ctx context.Context, rng *rand.Rand, lo, hi time.Duration, jobs int, fn func()) {
	last := r.finished()
	every(ctx, rng, lo, hi, func() {
		for r.finished() < last+jobs {
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		fn()
		last = r.finished()
	})
}

// killer SIGKILLs a random worker, or one time in four stops it past its
// lease and continues it, and starts a new incarnation in its place. The
// rescue sends a killed worker's jobs back, and the queue delivers them
// again, once its worker lease has lapsed; a reclaim may fail them first,
// or the queue redeliver them once their queue lease runs out.
func (r *run) killer(ctx context.Context, workers int) {
	rng := rand.New(rand.NewPCG(r.seed, 200))
	r.paced(ctx, rng, 300*time.Millisecond, 1200*time.Millisecond, 15, func() {
		slot := rng.IntN(workers)
		comeback := rng.IntN(4) == 0
		r.mu.Lock()
		w := r.workers[slot]
		r.mu.Unlock()
		if !w.taken.CompareAndSwap(false, true) {
			return // it exited on its own: the supervisor replaces it
		}
		if comeback {
			r.comeback(ctx, w)
		} else {
			r.kill(ctx, w)
		}
		r.replace(slot, w)
	})
}

// kill SIGKILLs w and records it.
func (r *run) kill(ctx context.Context, w *workerProc) {
	var midTx bool
	_ = r.pool.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity
		WHERE application_name = $1 AND state IN ('active', 'idle in transaction')`, w.app).Scan(&midTx)
	_ = w.cmd.Process.Kill()
	<-w.exited
	chaos.Crashed(r.record, chaos.WorkerProcess(w.incarnation))
	r.killed.Add(1)
	if midTx {
		r.killedMidTx.Add(1)
	}
	if _, err := r.pool.Exec(context.Background(), `INSERT INTO kills (incarnation, mid_transaction) VALUES ($1, $2)`,
		w.incarnation, midTx); err != nil {
		r.t.Errorf("record kill: %v", err)
	}
}

// comeback SIGSTOPs w, waits until its lease has lapsed on the database's
// clock and the rescue has taken its running jobs (those it holds locked
// in an open transaction it cannot take), then SIGCONTs it: its
// executions come back to heartbeats and saves that the generation must
// refuse, and the process, told that its lease is lost, starts nothing
// more and exits.
//
// A worker stopped before it has taken its lease (a replacement still
// starting) would come back to take a fresh one, never lose it, and never
// exit: it is stopped once its lease is live, and killed instead if that
// never comes (unless it exits first, as a replacement that lost its lease
// on its own). Its lease is read on a context the run's end does not
// cancel, and a read that fails tells nothing: a stop must last until the
// lease has lapsed, even when the run ends meanwhile, or the worker comes
// back to a live lease.
func (r *run) comeback(ctx context.Context, w *workerProc) {
	owner := chaos.WorkerProcess(w.incarnation)
	qctx := context.WithoutCancel(ctx)
	lease := func(live bool) func() bool { // whether the lease is known to be live (or lapsed)
		return func() bool {
			var got bool
			err := r.pool.QueryRow(qctx, `SELECT EXISTS (SELECT 1 FROM jobguard_workers WHERE id = $1 AND expires_at > now())`, owner).Scan(&got)
			return err == nil && got == live
		}
	}
	exited := func() bool {
		select {
		case <-w.exited:
			return true
		default:
			return false
		}
	}
	waitUntil(qctx, stallWindow, func() bool { return exited() || lease(true)() })
	switch {
	case exited():
		r.respawned.Add(1)
		return
	case !lease(true)():
		r.kill(qctx, w)
		return
	}
	_ = w.cmd.Process.Signal(syscall.SIGSTOP)
	r.record(`INSERT INTO stops (incarnation) VALUES ($1)`, w.incarnation)
	waitUntil(qctx, stallWindow, lease(false))
	waitUntil(qctx, time.Second, func() bool {
		var running bool
		err := r.pool.QueryRow(qctx, `SELECT EXISTS (SELECT 1 FROM jobs WHERE lease_id = $1 AND status = 'PROCESSING')`, owner).Scan(&running)
		return err == nil && !running
	})
	_ = w.cmd.Process.Signal(syscall.SIGCONT)
	r.record(`UPDATE stops SET continued_at = clock_timestamp() WHERE incarnation = $1`, w.incarnation)
	r.stopped.Add(1)
	select {
	case <-w.exited:
	case <-time.After(stallWindow):
		r.t.Errorf("worker %d did not exit within %v of losing its lease", w.incarnation, stallWindow)
		_ = w.cmd.Process.Kill()
		<-w.exited
		chaos.Crashed(r.record, owner)
	}
}

// waitUntil polls cond every 20ms until it holds, ctx ends or d passes.
func waitUntil(ctx context.Context, d time.Duration, cond func() bool) {
	deadline := time.Now().Add(d)
	for ctx.Err() == nil && time.Now().Before(deadline) && !cond() {
		time.Sleep(20 * time.Millisecond)
	}
}

// supervise replaces, until ctx ends, every worker that exited on its
// own: its lease was lost (a loaded machine delayed its renewals past the
// TTL), so it started nothing more and stopped.
func (r *run) supervise(ctx context.Context) {
	for ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		r.mu.Lock()
		ws := append([]*workerProc(nil), r.workers...)
		r.mu.Unlock()
		for slot, w := range ws {
			select {
			case <-w.exited:
			default:
				continue
			}
			if r.closing.Load() || !w.taken.CompareAndSwap(false, true) {
				continue
			}
			r.respawned.Add(1)
			r.replace(slot, w)
		}
	}
}

// replace starts a new incarnation in slot, where w was, unless the run is
// stopping its workers.
func (r *run) replace(slot int, w *workerProc) {
	r.mu.Lock()
	current := r.workers[slot] == w
	r.mu.Unlock()
	if !current || r.closing.Load() {
		return
	}
	if err := r.startWorker(slot); err != nil {
		r.t.Errorf("restart worker: %v", err)
	}
}

// terminator ends, from the server side, a worker connection that is in
// the middle of a transaction.
func (r *run) terminator(ctx context.Context) {
	rng := rand.New(rand.NewPCG(r.seed, 300))
	r.paced(ctx, rng, 100*time.Millisecond, 400*time.Millisecond, 3, func() {
		rows, err := r.pool.Query(ctx, `SELECT pid FROM pg_stat_activity
			WHERE application_name LIKE $1 AND state = 'idle in transaction' ORDER BY pid`, r.appName+"-w%")
		if err != nil {
			return
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil || len(pids) == 0 {
			return
		}
		var ok bool
		if err := r.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pids[rng.IntN(len(pids))]).Scan(&ok); err == nil && ok {
			r.terminated.Add(1)
		}
	})
}

// redisOutages stops the private Redis and starts it again.
func (r *run) redisOutages(ctx context.Context) {
	rng := rand.New(rand.NewPCG(r.seed, 400))
	r.paced(ctx, rng, 1500*time.Millisecond, 3000*time.Millisecond, 40, func() {
		if err := r.redis.Stop(); err != nil {
			r.t.Errorf("redis outage: %v", err)
			return
		}
		time.Sleep(200*time.Millisecond + time.Duration(rng.IntN(400))*time.Millisecond)
		if err := r.redis.Start(); err != nil {
			r.t.Errorf("redis outage: %v", err)
			return
		}
		r.outages.Add(1)
	})
}

// sessionFaults, in a Postgres-only run, terminates from the server side
// either every worker's listening session, so that notices are missed
// until the watchers resubscribe and check, or a reclaimer's session in
// the middle of a sweep (it waits up to a second to find one busy), whose
// transaction rolls back with its markers, or commits and the reclaimer
// never hears it did.
func (r *run) sessionFaults(ctx context.Context) {
	rng := rand.New(rand.NewPCG(r.seed, 700))
	terminate := func(sql, pattern string) int64 {
		var n int64
		_ = r.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name LIKE $1 AND `+sql, pattern).Scan(&n)
		return n
	}
	r.paced(ctx, rng, 500*time.Millisecond, 1500*time.Millisecond, 20, func() {
		if rng.IntN(2) == 0 {
			r.listenersTerminated.Add(terminate(`true`, r.appName+"-w%-listen"))
			return
		}
		for range 200 {
			if n := terminate(`state IN ('active', 'idle in transaction')`, r.appName+"-reclaimer-%"); n > 0 || ctx.Err() != nil {
				r.reclaimersTerminated.Add(n)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// operator, at random, retries a reclaimed job, the one way out of FAILED,
// cancels a running or a queued job, or retries a cancelled one; each
// within its budget.
func (r *run) operator(ctx context.Context) {
	rng := rand.New(rand.NewPCG(r.seed, 500))
	hist := chaos.NewRecorder("operator", r.record)
	budget := max(4, r.jobs/100)
	every(ctx, rng, 150*time.Millisecond, 450*time.Millisecond, func() {
		switch rng.IntN(3) {
		case 0:
			if r.retries.Load() < int64(budget) && r.retry(ctx, hist, "reclaimed%") {
				r.retries.Add(1)
			}
		case 1:
			status := []string{"PROCESSING", "QUEUED"}[rng.IntN(2)]
			if r.cancels.Load() < int64(budget) && r.cancel(ctx, hist, status) {
				r.cancels.Add(1)
			}
		default:
			if r.cancelRetries.Load() < int64(budget/3) && r.retry(ctx, hist, jobguard.CancelledReasonDefault+"%") {
				r.cancelRetries.Add(1)
			}
		}
	})
}

// cancel cancels a random job in status, recording its invoke and, in the
// cancel's transaction, its ok with the generation the cancel bumped to.
// It reports whether a cancel committed.
func (r *run) cancel(ctx context.Context, hist *chaos.Recorder, status string) bool {
	var call *chaos.Call
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		var id string
		err := tx.QueryRow(ctx, `SELECT id::text FROM jobs WHERE status = $1 ORDER BY random() LIMIT 1`, status).Scan(&id)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT set_config('chaos.actor', 'cancel', true)`); err != nil {
			return err
		}
		c := hist.Invoke(history.OpCancel, id, 0) // on a connection of its own: committed before the cancel
		call = &c
		lost, err := r.guard.Cancel(ctx, tx, id, "chaos operator")
		if err != nil {
			return err
		}
		return call.OK(ctx, tx, lost.Generation+1)
	})
	if err != nil && call != nil {
		call.Outcome(err)
	}
	return err == nil
}

// retry retries the FAILED job whose failure reason is like reason that
// failed last, puts its parent back to work and queues it again. It
// reports whether a retry committed.
func (r *run) retry(ctx context.Context, hist *chaos.Recorder, reason string) bool {
	var call *chaos.Call
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		var id string
		err := tx.QueryRow(ctx, `SELECT id::text FROM jobs WHERE status = 'FAILED' AND failure_reason LIKE $1
			ORDER BY updated_at DESC LIMIT 1`, reason).Scan(&id)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT set_config('chaos.actor', 'retry', true)`); err != nil {
			return err
		}
		c := hist.Invoke(history.OpRetry, id, 0) // on a connection of its own: committed before the retry
		call = &c
		gen, err := r.guard.Retry(ctx, tx, id)
		if err != nil {
			return err
		}
		if err := call.OK(ctx, tx, gen); err != nil {
			return err
		}
		// The operator's retry puts the parent back to work with the job:
		// the reclaimer's parent rules move a parent only from there.
		for _, sql := range []string{
			`UPDATE courses SET status = 'GENERATING' WHERE status = 'FAILED' AND id = (SELECT parent_id FROM jobs WHERE id = $1)`,
			`UPDATE videos SET status = 'ENCODING' WHERE status = 'FAILED' AND id = (SELECT parent_id FROM jobs WHERE id = $1)`,
		} {
			if _, err := tx.Exec(ctx, sql, id); err != nil {
				return err
			}
		}
		// A late worker may still hold the old queue row: clearing its
		// token keeps it from removing the retried job's delivery.
		_, err = tx.Exec(ctx, `INSERT INTO queue (job_id, deliveries) VALUES ($1, 1)
			ON CONFLICT (job_id) DO UPDATE SET visible_at = now(), token = NULL`, id)
		return err
	})
	if err != nil && call != nil {
		call.Outcome(err)
	}
	return err == nil
}

func (r *run) table(jobs int, elapsed time.Duration, violations int, hist history.Stats, judged int) string {
	ctx := context.Background()
	count := func(sql string) int {
		var n int
		require.NoError(r.t, r.pool.QueryRow(ctx, sql).Scan(&n), sql)
		return n
	}
	event := func(kind string) int {
		return count(`SELECT count(*) FROM events WHERE kind = '` + kind + `'`)
	}
	r.mu.Lock()
	rep := r.reported
	r.mu.Unlock()
	lines := [][2]string{
		{"seed", strconv.FormatUint(r.seed, 10)},
		{"elapsed", elapsed.Round(time.Millisecond).String()},
		{"jobs", strconv.Itoa(jobs)},
		{"completed", strconv.Itoa(count(`SELECT count(*) FROM jobs WHERE status = 'COMPLETED'`))},
		{"failed", strconv.Itoa(count(`SELECT count(*) FROM jobs WHERE status = 'FAILED'`))},
		{"reclaimed", strconv.Itoa(count(`SELECT count(*) FROM job_audit WHERE actor = 'reclaim'`))},
		{"reclaims that lost the race", strconv.Itoa(rep.LostRace)},
		{"late completions rejected", strconv.Itoa(event(chaos.EventLateRejected))},
		{"start refusals", strconv.Itoa(event(chaos.EventStartRefused))},
		{"stale-generation writes refused", strconv.Itoa(event(chaos.EventStaleRefused))},
		{"heartbeats that found the job lost", strconv.Itoa(event(chaos.EventHeartbeatLost))},
		{"saves failed and redelivered", strconv.Itoa(event(chaos.EventSaveError))},
		{"usage accrued (by workers / by settle sweeps)", fmt.Sprintf("%d (%d / %d)", count(`SELECT count(*) FROM usage_ledger`),
			event(chaos.EventAccrued), r.settled.Accrued)},
		{"finalizes left to settle (update failed / killed)", fmt.Sprintf("%d / %d", event(chaos.EventUnsettled),
			count(chaos.KilledAfterCompletion))},
		{"settle: settled / raced / retried / given up", fmt.Sprintf("%d / %d / %d / %d",
			r.settled.Settled, r.settled.Raced, r.settled.Retrying, r.settled.GivenUp)},
		{"confirmed finalizes unbilled", strconv.Itoa(count(chaos.Unbilled))},
		{"operator retries", strconv.Itoa(int(r.retries.Load()))},
		{"rescued (killed / stopped / lease lost on its own)", fmt.Sprintf("%d (%d / %d / %d)",
			count(`SELECT count(*) FROM job_audit WHERE actor = 'rescue'`), count(rescuedFrom("kills")), count(rescuedFrom("stops")),
			count(rescuedFrom(`events WHERE kind = 'lease_lost' AND incarnation NOT IN (SELECT incarnation FROM stops)`)))},
		{"operator cancels (running / queued); retried", fmt.Sprintf("%d (%d / %d); %d",
			count(`SELECT count(*) FROM job_audit WHERE actor = 'cancel'`),
			count(`SELECT count(*) FROM job_audit WHERE actor = 'cancel' AND old_status = 'PROCESSING'`),
			count(`SELECT count(*) FROM job_audit WHERE actor = 'cancel' AND old_status = 'QUEUED'`), r.cancelRetries.Load())},
		{"starts refused: cancelled", strconv.Itoa(count(`SELECT count(*) FROM events WHERE kind = 'start_refused' AND detail LIKE '%cancelled%'`))},
		{"workers stopped past their lease (refusals after)", fmt.Sprintf("%d (%d)", r.stopped.Load(), count(comebackRefusals))},
		{"workers that lost their lease unstopped, replaced", strconv.Itoa(int(r.respawned.Load()))},
		{"sweeps (errors)", fmt.Sprintf("%d (%d)", r.sweeps.Load(), rep.SweepErrors)},
		{"marker write errors", strconv.Itoa(rep.MarkerErrors)},
		{"killed processes (mid-transaction)", fmt.Sprintf("%d (%d)", r.killed.Load(), r.killedMidTx.Load())},
		{"mode", r.mode.name},
	}
	if r.mode.postgresOnly {
		lines = append(lines, [][2]string{
			{"calls cancelled by a notice / by the check", fmt.Sprintf("%d / %d",
				count(`SELECT count(*) FROM events WHERE kind = 'cancelled' AND detail = 'notice'`),
				count(`SELECT count(*) FROM events WHERE kind = 'cancelled' AND detail = 'check'`))},
			{"listening / reclaimer sessions terminated", fmt.Sprintf("%d / %d",
				r.listenersTerminated.Load(), r.reclaimersTerminated.Load())},
		}...)
	} else {
		lines = append(lines, [2]string{"Redis outages survived", strconv.Itoa(int(r.outages.Load()))})
	}
	lines = append(lines, [][2]string{
		{"terminated connections", strconv.Itoa(int(r.terminated.Load()))},
		{"invariant violations", strconv.Itoa(violations)},
		{"history", hist.String()},
		{"history checker violations", strconv.Itoa(judged)},
	}...)
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "  %-46s %s\n", l[0], l[1])
	}
	return b.String()
}
