package reclaim_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/chaos"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/sourcetest"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/reclaim/bullmq"
)

// faultSetup is a default jobs table with a courses table for the parent
// rule, and a stuck chapter job whose parent is course-1.
type faultSetup struct {
	jobs  *fixture.Jobs
	env   *testenv.Env
	stuck string
}

func newFaultSetup(t *testing.T) faultSetup {
	t.Helper()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	env.Exec(`CREATE TABLE courses (id text PRIMARY KEY, status text NOT NULL DEFAULT 'GENERATING')`)
	env.Exec(`INSERT INTO courses (id) VALUES ('course-1')`)
	stuck := jobs.Insert(t, fixture.Job{Generation: 3, ParentID: "course-1", UpdatedAgo: time.Hour})
	return faultSetup{jobs: jobs, env: env, stuck: stuck}
}

func (s faultSetup) course(t *testing.T) string {
	t.Helper()
	var st string
	require.NoError(t, s.env.Pool.QueryRow(context.Background(), `SELECT status FROM courses WHERE id = 'course-1'`).Scan(&st))
	return st
}

// faultConfig is the reclaimer of these tests: chapters over a minute
// without progress for a minute are stuck; their course fails with them.
func faultConfig(t testing.TB, db *pgxpool.Pool, guard *jobguard.Guard, rdb marker.Redis, logger *slog.Logger) reclaim.Config {
	t.Helper()
	rule, err := reclaim.SetParent(reclaim.ParentUpdate{Table: "courses", Column: "status", Value: "FAILED", From: []string{"GENERATING"}})
	require.NoError(t, err)
	return reclaim.Config{
		Guard: guard, DB: db, Redis: rdb,
		Limits:     reclaim.StaticLimits{"chapter": time.Minute},
		NoProgress: time.Minute,
		OnReclaim:  map[string]reclaim.ParentRule{"chapter": rule},
		Logger:     logger,
	}
}

func TestFaults_RedisDown_ReclaimsInDatabaseAndReportsMarkerErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newFaultSetup(t)
	srv, err := chaos.StartRedis(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })

	// One job reclaimed while Redis is up: its marker must survive the outage.
	before := s.jobs.Insert(t, fixture.Job{Generation: 1, UpdatedAgo: time.Hour})
	var logs testenv.Logs
	r, err := reclaim.New(faultConfig(t, s.env.Pool, s.jobs.Guard, rdb, slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, rep.Reclaimed)
	require.Zero(t, rep.MarkerErrors)

	// Now Redis goes away, and another job gets stuck.
	require.NoError(t, srv.Stop())
	later := s.jobs.Insert(t, fixture.Job{Generation: 7, UpdatedAgo: time.Hour})
	rep, err = r.Sweep(ctx)
	require.NoError(t, err, "the database write does not depend on Redis")
	require.Equal(t, 1, rep.Reclaimed)
	require.Equal(t, 1, rep.MarkerErrors, "the marker that could not be written is counted")
	require.Equal(t, []string{later}, rep.ReclaimedIDs)
	require.Contains(t, logs.String(), "marker_errors=1")
	require.Contains(t, logs.String(), "marker_error=")
	row := s.jobs.Read(t, later)
	require.Equal(t, "FAILED", row.Status)
	require.Equal(t, jobguard.ReclaimedReasonDefault, row.Reason)

	starts, err := jobguard.NewStartGuard(s.jobs.Guard, rdb, jobguard.StartGuardConfig{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	_, err = starts.Start(ctx, s.env.Pool, later)
	require.ErrorIs(t, err, jobguard.ErrReclaimed, "the database reason refuses while Redis is down")

	// Redis returns: nothing reclaimed is lost, nothing is reclaimed twice.
	require.NoError(t, srv.Start())
	for _, id := range []string{s.stuck, before} {
		m, found, err := starts.Markers().Read(ctx, id)
		require.NoError(t, err)
		require.True(t, found, "marker of %s written before the outage", id)
		require.Equal(t, jobguard.ReclaimedReasonDefault, m.Reason)
	}
	_, found, err := starts.Markers().Read(ctx, later)
	require.NoError(t, err)
	require.False(t, found, "the failed marker is not invented later")
	for _, id := range []string{s.stuck, before, later} {
		_, err = starts.Start(ctx, s.env.Pool, id)
		require.ErrorIs(t, err, jobguard.ErrReclaimed)
	}
	rep, err = r.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Reclaimed)
	require.Equal(t, "FAILED", s.course(t))
}

// The reclaimer process is started by the test below, with the config in
// this variable; it sweeps once, then the test kills it.
const faultChildEnv = "JOBGUARD_FAULT_RECLAIMER"

type faultChild struct {
	DatabaseURL string
	RedisAddr   string
	Prefix      string
	// BlockInRule makes the parent rule block inside the reclaim's
	// transaction, after the UPDATE.
	BlockInRule bool
}

// TestFaults_ReclaimerChild is the reclaimer process of the kill tests; it
// does nothing in a normal run.
func TestFaults_ReclaimerChild(t *testing.T) {
	raw := os.Getenv(faultChildEnv)
	if raw == "" {
		t.Skip("runs only as the child process of the reclaimer kill tests")
	}
	var c faultChild
	require.NoError(t, json.Unmarshal([]byte(raw), &c))
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, c.DatabaseURL)
	require.NoError(t, err)
	guard, err := jobguard.NewWithConfig(ctx, pool, jobguard.DefaultTable(), jobguard.GuardConfig{Shared: jobguard.Shared{Prefix: c.Prefix, Markers: jobguard.MarkersRedis}})
	require.NoError(t, err)
	rdb := redis.NewClient(&redis.Options{Addr: c.RedisAddr, ReadTimeout: -1, WriteTimeout: -1, MaxRetries: -1})
	cfg := faultConfig(t, pool, guard, rdb, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if c.BlockInRule {
		set := cfg.OnReclaim["chapter"]
		cfg.OnReclaim["chapter"] = func(ctx context.Context, tx pgx.Tx, jobs []jobset.Job) error {
			if err := set(ctx, tx, jobs); err != nil {
				return err
			}
			os.Stdout.WriteString("in-rule\n")
			select {} // killed here, inside the transaction
		}
	}
	r, err := reclaim.New(cfg)
	require.NoError(t, err)
	_, err = r.Sweep(ctx) // with a silent Redis, blocks in the marker write after the commit
	require.NoError(t, err)
}

// startFaultChild runs the reclaimer child process and returns it with its
// stdout lines.
func startFaultChild(t *testing.T, c faultChild) (*exec.Cmd, <-chan string) {
	t.Helper()
	raw, err := json.Marshal(c)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestFaults_ReclaimerChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), faultChildEnv+"="+string(raw))
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("reclaimer process stderr:\n%s", stderr.String())
		}
	})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return cmd, lines
}

// silentRedis accepts connections and never answers, so a client writing
// to it waits forever.
func silentRedis(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

func TestFaults_ReclaimerKilledBetweenUpdateAndMarkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newFaultSetup(t)
	cmd, _ := startFaultChild(t, faultChild{DatabaseURL: s.env.DatabaseURL, RedisAddr: silentRedis(t), Prefix: s.env.Prefix})

	// The child commits the reclaim, then hangs writing the marker.
	require.Eventually(t, func() bool { return s.jobs.Read(t, s.stuck).Status == "FAILED" }, testenv.Patience, 20*time.Millisecond)
	require.NoError(t, cmd.Process.Kill())

	row := s.jobs.Read(t, s.stuck)
	require.Equal(t, jobguard.ReclaimedReasonDefault, row.Reason)
	require.Equal(t, int64(3), row.Generation)
	require.Equal(t, "FAILED", s.course(t), "the parent changed with its job")
	starts, err := jobguard.NewStartGuard(s.jobs.Guard, s.env.Redis, jobguard.StartGuardConfig{
		OnLookupError: jobguard.FailClosed,
	})
	require.NoError(t, err)
	_, found, err := starts.Markers().Read(ctx, s.stuck)
	require.NoError(t, err)
	require.False(t, found, "the process died before its markers")

	_, err = starts.Start(ctx, s.env.Pool, s.stuck)
	var re *jobguard.ReclaimedError
	require.ErrorAs(t, err, &re, "the start guard refuses through the database reason")
	require.Equal(t, "database", re.Source)
	require.True(t, jobguard.IsPermanent(err))
}

func TestFaults_ReclaimerKilledInsideItsTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newFaultSetup(t)
	before := s.jobs.Read(t, s.stuck)
	cmd, lines := startFaultChild(t, faultChild{
		DatabaseURL: s.env.DatabaseURL, RedisAddr: s.env.Redis.Options().Addr, Prefix: s.env.Prefix, BlockInRule: true,
	})
	select {
	case line := <-lines:
		require.Equal(t, "in-rule", line)
	case <-time.After(30 * time.Second):
		t.Fatal("the reclaimer never reached its parent rule")
	}
	require.NoError(t, cmd.Process.Kill())

	// The UPDATE and the parent's write died with the transaction.
	require.Eventually(t, func() bool {
		var n int
		err := s.env.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE c.relname = 'jobs' AND c.relnamespace = $1::regnamespace AND l.mode = 'RowExclusiveLock'`, s.env.Schema).Scan(&n)
		return err == nil && n == 0
	}, testenv.Patience, 20*time.Millisecond, "the killed transaction is gone")
	require.Equal(t, before, s.jobs.Read(t, s.stuck))
	require.Equal(t, "GENERATING", s.course(t))
	_, found, err := markerStore(t, s).Read(ctx, s.stuck)
	require.NoError(t, err)
	require.False(t, found)

	// The next sweep reclaims the job whole.
	r, err := reclaim.New(faultConfig(t, s.env.Pool, s.jobs.Guard, s.env.Redis, slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoError(t, err)
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Reclaimed)
	require.Equal(t, "FAILED", s.course(t))
	m, found, err := markerStore(t, s).Read(ctx, s.stuck)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, int64(3), m.Generation)
}

func markerStore(t *testing.T, s faultSetup) *marker.RedisStore {
	t.Helper()
	m, err := marker.NewRedisStore(s.jobs.Guard, s.env.Redis, marker.Config{})
	require.NoError(t, err)
	return m
}

func TestFaults_GarbageBullMQHashes_AreSkippedWithAWarningNeverGuessed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newFaultSetup(t)
	rdb := s.env.Redis
	base := s.env.Prefix + ":chapters:"
	hourAgo := strconv.FormatInt(time.Now().Add(-time.Hour).UnixMilli(), 10)
	// Every row below is as stuck as s.stuck, but for its own start column
	// (emptied, so that only the queue could say when its attempt began);
	// only its queue entry is bad.
	garbled := map[string]map[string]any{
		"processedOn not a number": {"name": "chapter", "processedOn": "yesterday"},
		"processedOn negative":     {"name": "chapter", "processedOn": "-5"},
		"processedOn binary":       {"name": "chapter", "processedOn": "\x00\xff\xfe"},
		"processedOn missing":      {"name": "chapter"},
		"name unknown":             {"name": "chapter\x00", "processedOn": hourAgo},
	}
	ids := map[string]string{}
	for what, fields := range garbled {
		id := s.jobs.Insert(t, fixture.Job{Generation: 1, ParentID: "course-1", UpdatedAgo: time.Hour})
		s.env.Exec(`UPDATE jobs SET started_at = NULL WHERE id = $1`, id)
		ids[what] = id
		require.NoError(t, rdb.HSet(ctx, base+id, fields).Err())
		require.NoError(t, rdb.RPush(ctx, base+"active", id).Err())
	}
	noHash := s.jobs.Insert(t, fixture.Job{Generation: 1, ParentID: "course-1", UpdatedAgo: time.Hour})
	require.NoError(t, rdb.RPush(ctx, base+"active", noHash, "../../not-a-uuid", "").Err())
	require.NoError(t, rdb.HSet(ctx, base+"../../not-a-uuid", "name", "chapter", "processedOn", hourAgo).Err())
	require.NoError(t, rdb.HSet(ctx, base+s.stuck, "name", "chapter", "processedOn", hourAgo).Err())
	require.NoError(t, rdb.RPush(ctx, base+"active", s.stuck).Err())

	src, err := bullmq.New(bullmq.Config{Redis: rdb, Prefix: s.env.Prefix, Queue: "chapters"})
	require.NoError(t, err)
	var logs testenv.Logs
	debug := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := faultConfig(t, s.env.Pool, s.jobs.Guard, rdb, debug)
	cfg.Source = src
	r, err := reclaim.New(cfg)
	require.NoError(t, err)
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)

	require.Equal(t, []string{s.stuck}, rep.ReclaimedIDs, "only the readable stuck job is reclaimed")
	require.Equal(t, 6, rep.SourceErrors, "bad processedOn (3), the missing hash, the empty id and the id that is no uuid")
	require.Equal(t, 1, rep.NoStartTime)
	require.Equal(t, 1, rep.UnknownType)
	require.Contains(t, logs.String(), "level=WARN msg=\"reclaim: sweep\"", "the summary asks for an operator")
	require.Contains(t, logs.String(), "source_errors=6")
	require.Contains(t, logs.String(), "cannot read active job")
	require.Contains(t, logs.String(), "yesterday", "the job's line shows what was read")
	for what, id := range ids {
		require.Equal(t, "PROCESSING", s.jobs.Read(t, id).Status, what)
	}
	require.Equal(t, "PROCESSING", s.jobs.Read(t, noHash).Status)
}

func TestFaults_BullMQJobKeyOfAnotherType_IsSkippedNotFatal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newFaultSetup(t)
	rdb := s.env.Redis
	base := s.env.Prefix + ":chapters:"
	require.NoError(t, rdb.Set(ctx, base+s.stuck, "not a hash", 0).Err())
	require.NoError(t, rdb.RPush(ctx, base+"active", s.stuck).Err())

	src, err := bullmq.New(bullmq.Config{Redis: rdb, Prefix: s.env.Prefix, Queue: "chapters"})
	require.NoError(t, err)
	jobs, err := sourcetest.All(ctx, src, 100)
	require.NoError(t, err, "one garbled key must not hide the rest of the queue")
	require.Len(t, jobs, 1)
	require.ErrorIs(t, jobs[0].Err, bullmq.ErrNoJobHash)
	require.ErrorContains(t, jobs[0].Err, "holds a string")

	cfg := faultConfig(t, s.env.Pool, s.jobs.Guard, rdb, slog.New(slog.NewTextHandler(io.Discard, nil)))
	cfg.Source = src
	r, err := reclaim.New(cfg)
	require.NoError(t, err)
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.SourceErrors)
	require.Zero(t, rep.Reclaimed)
	require.Equal(t, "PROCESSING", s.jobs.Read(t, s.stuck).Status)
	require.Equal(t, "GENERATING", s.course(t))
}
