package watch_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/watch"
)

// privateRedis is a redis-server of the test's own, on a port of its own,
// that the test may stop and start again. The shared server is never
// touched.
type privateRedis struct {
	t    *testing.T
	port int
	cmd  *exec.Cmd
}

func startPrivateRedis(t *testing.T) *privateRedis {
	t.Helper()
	_, err := exec.LookPath("redis-server")
	require.NoError(t, err, "the outage test starts a redis-server of its own, which it may stop")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	r := &privateRedis{t: t, port: port}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *privateRedis) addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

func (r *privateRedis) start() {
	r.t.Helper()
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no")
	require.NoError(r.t, r.cmd.Start())
	c := redisClient(r.t, r.addr())
	require.Eventually(r.t, func() bool { return c.Ping(context.Background()).Err() == nil },
		10*time.Second, 10*time.Millisecond, "private redis-server on port %d never answered", r.port)
}

func (r *privateRedis) stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

func TestWatch_RedisRestartCheckCatchesReclaimDuringOutage(t *testing.T) {
	t.Parallel()
	srv := startPrivateRedis(t)
	rdb := redisClient(t, srv.addr())
	b := setup(t, "", fixture.Default, watch.Config{
		Transport:     watch.Transport{Redis: rdb},
		CheckInterval: time.Hour, // only the check after resubscribing can catch it
		ReconnectMin:  20 * time.Millisecond,
		ReconnectMax:  100 * time.Millisecond,
	})
	reclaimed, owned := b.start(t, 7), b.start(t, 7)
	ctx := b.watch(t, reclaimed)
	other := b.watch(t, owned)

	srv.stop()
	require.Eventually(t, func() bool { return !b.w.Subscribed() }, testenv.Patience, 5*time.Millisecond)
	b.reclaim(t, false, reclaimed.JobID)
	err := b.pub.Publish(context.Background(), watch.Notice{JobID: reclaimed.JobID, Generation: 7})
	require.Error(t, err, "the notice cannot reach a stopped Redis")
	time.Sleep(300 * time.Millisecond) // several failed resubscribes
	requireAlive(t, ctx, "the reclaimed execution during the outage (nothing can tell it yet)")

	restarted := time.Now()
	srv.start()
	cause, took := cancelledWithin(t, ctx, restarted, 2*time.Second)
	t.Logf("cancelled %v after Redis came back", took)
	require.Equal(t, watch.ViaCheck, cause.Via)
	require.Equal(t, "FAILED", cause.Status)
	requireAlive(t, other, "the execution that still owns its row")
	logs := b.logs.String()
	require.Contains(t, logs, "subscription lost")
	require.Contains(t, logs, "subscription restored")

	// Notices flow again on the new subscription.
	waitSubscribed(t, b.w)
	at := b.reclaim(t, true, owned.JobID)
	cause, _ = cancelledWithin(t, other, at, time.Second)
	require.Equal(t, watch.ViaNotice, cause.Via)
}

func TestWatch_PostgresListenerKilledResubscribesAndChecks(t *testing.T) {
	t.Parallel()
	b := setup(t, "postgres", fixture.Default, watch.Config{
		CheckInterval: time.Hour,
		ReconnectMin:  time.Second, // a window to reclaim in while nobody listens
		ReconnectMax:  time.Second,
	})
	exec := b.start(t, 2)
	ctx := b.watch(t, exec)

	var killed int
	require.NoError(t, b.env.Pool.QueryRow(context.Background(),
		`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query = $1`,
		`LISTEN "`+b.env.Schema+`"`).Scan(&killed))
	require.Equal(t, 1, killed)
	require.Eventually(t, func() bool { return !b.w.Subscribed() }, testenv.Patience, 5*time.Millisecond)
	at := b.reclaim(t, true, exec.JobID) // nobody listens: the notice is lost

	cause, took := cancelledWithin(t, ctx, at, 3*time.Second)
	t.Logf("cancelled %v after the reclaim, by the check after resubscribing", took)
	require.Equal(t, watch.ViaCheck, cause.Via)
	require.True(t, b.w.Subscribed())
}

func TestWatch_QuietSubscriptionSurvivesPings(t *testing.T) {
	t.Parallel()
	eachTransport(t, func(t *testing.T, kind string) {
		// A ping must answer within its interval: long enough here that a
		// loaded machine answers, short enough for several in the test.
		b := setup(t, kind, fixture.Default, watch.Config{CheckInterval: time.Hour, PingInterval: 200 * time.Millisecond})
		exec := b.start(t, 1)
		ctx := b.watch(t, exec)
		time.Sleep(time.Second) // five ping intervals without a message
		require.True(t, b.w.Subscribed())
		require.NotContains(t, b.logs.String(), "subscription lost")
		at := b.reclaim(t, true, exec.JobID)
		cause, _ := cancelledWithin(t, ctx, at, time.Second)
		require.Equal(t, watch.ViaNotice, cause.Via)
	})
}

func TestWatch_CheckRunsWhileRedisIsDown(t *testing.T) {
	t.Parallel()
	srv := startPrivateRedis(t)
	b := setup(t, "", fixture.Default, watch.Config{
		Transport:     watch.Transport{Redis: redisClient(t, srv.addr())},
		CheckInterval: 100 * time.Millisecond,
		ReconnectMin:  20 * time.Millisecond,
		ReconnectMax:  100 * time.Millisecond,
	})
	exec := b.start(t, 3)
	ctx := b.watch(t, exec)

	srv.stop()
	require.Eventually(t, func() bool { return !b.w.Subscribed() }, testenv.Patience, 5*time.Millisecond)
	at := b.reclaim(t, false, exec.JobID)
	cause, took := cancelledWithin(t, ctx, at, time.Second)
	t.Logf("Redis down, check interval 100ms: cancelled %v after the reclaim", took)
	require.Equal(t, watch.ViaCheck, cause.Via)
	require.False(t, b.w.Subscribed())
}
