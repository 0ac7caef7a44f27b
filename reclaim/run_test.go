package reclaim_test

import (
	"context"
	"math/rand/v2"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/netproxy"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
)

// runner is one instance's Run loop.
type runner struct {
	logs   *testenv.Logs
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// startRun starts the instance name, which sweeps every 40ms, with a
// deadline a loaded machine meets: SweepTimeout defaults to Interval, and a
// 40ms deadline fails sweeps that are only slow, so that none reclaims.
func startRun(t *testing.T, jobs *fixture.Jobs, key int64, name string) *runner {
	t.Helper()
	return startRunWith(t, jobs, name, key, reclaim.Config{Interval: 40 * time.Millisecond, SweepTimeout: testenv.Patience})
}

// startRunWith starts the instance name, elected with the leader key key,
// which writes its name into the reasons of the jobs it reclaims. cfg.DB
// defaults to a pool of its own.
func startRunWith(t *testing.T, jobs *fixture.Jobs, name string, key int64, cfg reclaim.Config) *runner {
	t.Helper()
	if cfg.DB == nil {
		cfg.DB = jobs.Env.Connect(testenv.Config{MaxConns: 3})
	}
	cfg.Guard = jobs.GuardWith(t, jobguard.Shared{ReclaimedReason: jobguard.ReclaimedReasonDefault + " by " + name, LeaderKey: key})
	r, logs := newReclaimer(t, jobs, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	run := &runner{logs: logs, cancel: cancel, done: make(chan error, 1)}
	go func() { run.done <- r.Run(ctx) }()
	t.Cleanup(func() { _ = run.stop() })
	return run
}

// stop cancels Run and returns what it returned.
func (r *runner) stop() error {
	r.once.Do(func() {
		r.cancel()
		r.err = <-r.done
	})
	return r.err
}

// reclaimedBy inserts a stuck job and returns the instance that reclaims it.
func reclaimedBy(t *testing.T, jobs *fixture.Jobs) string {
	t.Helper()
	id := jobs.Insert(t, fixture.Job{UpdatedAgo: 2 * time.Hour})
	var by string
	require.Eventually(t, func() bool {
		row := jobs.Read(t, id)
		_, by, _ = strings.Cut(row.Reason, " by ")
		return row.Status == "FAILED"
	}, testenv.Patience, 10*time.Millisecond)
	return by
}

func leaderPID(t *testing.T, env *testenv.Env, key int64) int32 {
	t.Helper()
	var pid int32
	err := env.Pool.QueryRow(context.Background(), `
SELECT coalesce(max(pid), 0) FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 1
  AND classid::int8 = (($1::int8 >> 32) & 4294967295) AND objid::int8 = ($1::int8 & 4294967295)`, key).Scan(&pid)
	require.NoError(t, err)
	return pid
}

func TestRun_OneLeaderSweepsAndAnotherTakesOver(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	key := rand.Int64N(1<<62) + 1 // advisory locks are database-wide

	a := startRun(t, jobs, key, "a")
	require.Equal(t, "a", reclaimedBy(t, jobs))
	startRun(t, jobs, key, "b")
	for range 5 {
		require.Equal(t, "a", reclaimedBy(t, jobs), "only the leader sweeps")
	}

	require.NoError(t, a.stop())
	require.Equal(t, "b", reclaimedBy(t, jobs), "the standby takes over when the leader stops")

	// The leader's connection dies: the lock goes with it and some instance
	// holds it again within an interval or two.
	startRun(t, jobs, key, "c")
	dead := leaderPID(t, env, key)
	require.NotZero(t, dead)
	env.Exec(`SELECT pg_terminate_backend($1)`, dead)
	require.Eventually(t, func() bool {
		pid := leaderPID(t, env, key)
		return pid != 0 && pid != dead
	}, testenv.Patience, 10*time.Millisecond)
	require.NotEmpty(t, reclaimedBy(t, jobs))
}

func TestRun_ReleasesTheLockOnShutdown(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	key := rand.Int64N(1<<62) + 1

	a := startRun(t, jobs, key, "a")
	require.Eventually(t, func() bool { return leaderPID(t, env, key) != 0 }, testenv.Patience, 10*time.Millisecond)
	require.NoError(t, a.stop())
	// Run unlocks before it returns; when the unlock does not answer within
	// LivenessTimeout it closes the connection, and the server ends the
	// session, and its lock, a moment later.
	require.Eventually(t, func() bool { return leaderPID(t, env, key) == 0 }, testenv.Patience, 10*time.Millisecond,
		"the lock is gone once Run has returned")
}

func TestRun_LeadsWithAPoolOfOneConnection(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	key := rand.Int64N(1<<62) + 1
	pool := env.Connect(testenv.Config{MaxConns: 1})

	startRunWith(t, jobs, "a", key, reclaim.Config{DB: pool, Interval: 40 * time.Millisecond, SweepTimeout: testenv.Patience})
	require.Equal(t, "a", reclaimedBy(t, jobs), "the lock takes no room in the pool")
	var idle string
	require.NoError(t, pool.QueryRow(context.Background(), "SHOW idle_session_timeout").Scan(&idle))
	require.Equal(t, "0", idle, "the lock's session settings stay off the pool")
}

func TestNew_RejectsANegativeLivenessTimeout(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	_, err := reclaim.New(reclaim.Config{Guard: jobs.Guard, DB: env.Pool, Redis: env.Redis, LivenessTimeout: -time.Second})
	require.ErrorContains(t, err, "LivenessTimeout")
}

// The timings of the instances behind a proxy: short, so that a takeover
// takes about a second, with room for a loaded machine between a working
// leader's longest silence (an Interval) and the server's idle timeout
// (Interval + SweepTimeout + LivenessTimeout).
const (
	fastInterval = 200 * time.Millisecond
	fastSweep    = 200 * time.Millisecond
	fastLiveness = 500 * time.Millisecond
	// takeoverBound is the bound Run documents: a standby leads within
	// 2×Interval + SweepTimeout + 3×LivenessTimeout of the leader's last
	// contact with the server.
	takeoverBound = 2*fastInterval + fastSweep + 3*fastLiveness
	// slack absorbs a loaded machine; only an instance that misses the bound
	// by this much fails a test.
	slack = 5 * time.Second
)

// fastConfig is the configuration of an instance on db (its own pool when
// nil) with the short timings.
func fastConfig(db *pgxpool.Pool) reclaim.Config {
	return reclaim.Config{
		DB:              db,
		Interval:        fastInterval,
		SweepTimeout:    fastSweep,
		LivenessTimeout: fastLiveness,
	}
}

// through starts a proxy in front of env's PostgreSQL.
func through(t *testing.T, env *testenv.Env) *netproxy.Proxy {
	t.Helper()
	u, err := url.Parse(env.DatabaseURL)
	require.NoError(t, err)
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	return netproxy.New(t, target)
}

// connect opens a pool on env's schema whose sessions carry name as their
// application_name, through path when it is not nil.
func connect(t *testing.T, env *testenv.Env, name string, path *netproxy.Proxy) *pgxpool.Pool {
	t.Helper()
	u, err := url.Parse(env.DatabaseURL)
	require.NoError(t, err)
	if path != nil {
		u.Host = path.Addr()
	}
	cfg, err := pgxpool.ParseConfig(u.String())
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	cfg.MaxConns = 3
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	if path != nil {
		// Cut the path before the pool closes, so that closing does not
		// wait on a frozen one.
		t.Cleanup(path.Close)
	}
	return pool
}

// leaderName returns the application_name of the session that holds the
// lock, or "" when none does.
func leaderName(t *testing.T, env *testenv.Env, key int64) string {
	t.Helper()
	var name string
	err := env.Pool.QueryRow(context.Background(), `
SELECT coalesce(max(a.application_name), '') FROM pg_locks l JOIN pg_stat_activity a USING (pid)
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.classid::int8 = ($1::int8 >> 32) AND l.objid::int8 = ($1::int8 & 4294967295)`, key).Scan(&name)
	require.NoError(t, err)
	return name
}

// waitLeader waits until the instance name holds the lock.
func waitLeader(t *testing.T, env *testenv.Env, key int64, name string, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return leaderName(t, env, key) == name },
		within, 10*time.Millisecond, "%s does not lead within %v", name, within)
}

func TestRun_StandbyTakesOverFromAFrozenLeader(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	key := rand.Int64N(1<<62) + 1
	path := through(t, env)

	a := startRunWith(t, jobs, "a", key, fastConfig(connect(t, env, "a", path)))
	waitLeader(t, env, key, "a", testenv.Patience)
	startRunWith(t, jobs, "b", key, fastConfig(connect(t, env, "b", nil)))
	require.Equal(t, "a", reclaimedBy(t, jobs))
	require.Equal(t, "a", leaderName(t, env, key))

	// The leader's path goes silent: no bytes, no FIN, no reset. The server
	// still sees its session, idle.
	path.Freeze()
	frozen := time.Now()
	waitLeader(t, env, key, "b", takeoverBound+slack)
	t.Logf("b leads %v after the freeze (bound %v)", time.Since(frozen).Round(time.Millisecond), takeoverBound)
	require.Equal(t, "b", reclaimedBy(t, jobs))
	require.Eventually(t, func() bool { return strings.Contains(a.logs.String(), "leader connection lost") },
		takeoverBound+slack, 10*time.Millisecond, "the frozen leader drops the lead")

	// Its path works again: it finds the lock taken, and leaves the
	// sweeping to b.
	path.Thaw()
	for range 5 {
		require.Equal(t, "b", reclaimedBy(t, jobs))
	}
}

func TestRun_StandbyTakesOverWhenTheLeadersConnectionsReset(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	key := rand.Int64N(1<<62) + 1
	path := through(t, env)

	startRunWith(t, jobs, "a", key, fastConfig(connect(t, env, "a", path)))
	waitLeader(t, env, key, "a", testenv.Patience)
	standby := fastConfig(connect(t, env, "b", nil))
	// The standby's own deadlines are no part of the bound: generous, so
	// that a loaded machine's slow round trip does not fail its attempts.
	standby.SweepTimeout, standby.LivenessTimeout = testenv.Patience, testenv.Patience
	startRunWith(t, jobs, "b", key, standby)
	require.Equal(t, "a", reclaimedBy(t, jobs))
	require.Equal(t, "a", leaderName(t, env, key))

	// Every connection of the leader is reset, and its path stays down:
	// the server ends its sessions, and with them the lock, at once, and
	// the standby takes it at one of its next attempts. What the test
	// holds to is that it does, and then sweeps: how soon depends on the
	// machine's speed, and is only logged beside the bound (a frozen path,
	// whose session the server must time out, is the bound's own test).
	path.Freeze()
	path.Reset()
	reset := time.Now()
	waitLeader(t, env, key, "b", testenv.Patience)
	t.Logf("b leads %v after the reset (bound %v)", time.Since(reset).Round(time.Millisecond), takeoverBound)
	require.Equal(t, "b", reclaimedBy(t, jobs))
}

func TestRun_LeaderNoticesAFrozenPathAndStillStops(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	key := rand.Int64N(1<<62) + 1
	path := through(t, env)

	a := startRunWith(t, jobs, "a", key, fastConfig(connect(t, env, "a", path)))
	waitLeader(t, env, key, "a", testenv.Patience)

	path.Freeze()
	frozen := time.Now()
	// The check that follows the sweep under way (cut at SweepTimeout)
	// gives up after LivenessTimeout. How soon depends on the machine's
	// speed, and is only logged beside that bound: the standby's takeover
	// from a frozen leader is the bound's own test.
	require.Eventually(t, func() bool { return strings.Contains(a.logs.String(), "leader connection lost") },
		testenv.Patience, 10*time.Millisecond)
	t.Logf("a noticed %v after the freeze (bound %v)", time.Since(frozen).Round(time.Millisecond), fastInterval+fastSweep+fastLiveness)

	requireStops(t, a, testenv.Patience)
}

func TestRun_ReturnsWhenCancelledInsideAFrozenCheck(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	key := rand.Int64N(1<<62) + 1
	path := through(t, env)

	cfg := fastConfig(connect(t, env, "a", path))
	cfg.LivenessTimeout = time.Minute // the check outlasts the test
	a := startRunWith(t, jobs, "a", key, cfg)
	waitLeader(t, env, key, "a", testenv.Patience)

	path.Freeze()
	time.Sleep(2 * time.Second) // well inside the check that follows the next tick
	requireStops(t, a, slack)
}

// requireStops cancels r's Run and requires it to return nil within d.
func requireStops(t *testing.T, r *runner, d time.Duration) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.once.Do(func() { r.err = err })
		require.NoError(t, err)
	case <-time.After(d):
		r.once.Do(func() {}) // the cleanup must not wait for it either
		t.Fatalf("Run has not returned %v after its context ended", d)
	}
}
