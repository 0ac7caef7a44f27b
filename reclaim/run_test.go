package reclaim_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/fixture"
	"github.com/jobguard/jobguard/internal/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
)

// runner is one instance's Run loop.
type runner struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func startRun(t *testing.T, jobs *fixture.Jobs, key int64, name string) *runner {
	t.Helper()
	r, _ := newReclaimer(t, jobs, reclaim.Config{
		DB:        jobs.Env.Connect(testenv.Options{MaxConns: 3}), // an instance of its own
		Reason:    jobguard.ReclaimedReasonDefault + " by " + name,
		Interval:  40 * time.Millisecond,
		LeaderKey: key,
	})
	ctx, cancel := context.WithCancel(context.Background())
	run := &runner{cancel: cancel, done: make(chan error, 1)}
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
	}, 5*time.Second, 10*time.Millisecond)
	return by
}

func leaderPID(t *testing.T, env *testenv.Env, key int64) int32 {
	t.Helper()
	var pid int32
	err := env.Pool.QueryRow(context.Background(), `
SELECT coalesce(max(pid), 0) FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 1
  AND classid::int8 = ($1::int8 >> 32) AND objid::int8 = ($1::int8 & 4294967295)`, key).Scan(&pid)
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
	}, 5*time.Second, 10*time.Millisecond)
	require.NotEmpty(t, reclaimedBy(t, jobs))
}

func TestRun_ReleasesTheLockOnShutdown(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	key := rand.Int64N(1<<62) + 1

	a := startRun(t, jobs, key, "a")
	require.Eventually(t, func() bool { return leaderPID(t, env, key) != 0 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, a.stop())
	require.Zero(t, leaderPID(t, env, key), "the lock is gone once Run has returned")
}

func TestRun_NeedsRoomForTheLockConnection(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	r, _ := newReclaimer(t, jobs, reclaim.Config{DB: env.Connect(testenv.Options{MaxConns: 1})})
	require.ErrorContains(t, r.Run(context.Background()), "at least 2")
}
