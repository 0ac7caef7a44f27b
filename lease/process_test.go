package lease_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/chaos"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/lease"
)

// envChild, set in a child process, holds its JSON childConfig.
const envChild = "JOBGUARD_LEASE_CHILD"

// childConfig is what a child process holds a lease with.
type childConfig struct {
	DatabaseURL string `json:"database_url"`
	ID          string `json:"id"`
	TTLMS       int64  `json:"ttl_ms"`
	RenewMS     int64  `json:"renew_ms"`
}

func TestMain(m *testing.M) {
	if raw := os.Getenv(envChild); raw != "" {
		os.Exit(childMain(raw))
	}
	os.Exit(m.Run())
}

// childMain holds a lease until it is lost, then prints why and exits: a
// worker that stops its executions when its lease ends.
func childMain(raw string) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return 2
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer pool.Close()
	l, err := lease.New(pool, lease.Config{ID: cfg.ID,
		TTL: time.Duration(cfg.TTLMS) * time.Millisecond, Renew: time.Duration(cfg.RenewMS) * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := l.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("held")
	<-l.Lost()
	fmt.Println("lost:", l.Err())
	_ = l.Stop(ctx)
	return 0
}

// child is a process that holds a lease.
type child struct {
	cmd  *exec.Cmd
	out  *testenv.Logs
	done chan struct{} // closed when the process has ended
	err  error         // how it ended; read after done
}

// startChild starts a child holding the lease id, and waits until the
// database has seen it renew.
func startChild(t *testing.T, env *testenv.Env, id string, ttl, renew time.Duration) *child {
	t.Helper()
	raw, err := json.Marshal(childConfig{DatabaseURL: env.DatabaseURL, ID: id,
		TTLMS: ttl.Milliseconds(), RenewMS: renew.Milliseconds()})
	require.NoError(t, err)
	c := &child{cmd: exec.Command(os.Args[0], "-test.run=^$"), out: &testenv.Logs{}, done: make(chan struct{})}
	c.cmd.Env = append(os.Environ(), envChild+"="+string(raw))
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	c.cmd.SysProcAttr = chaos.ProcAttr(syscall.SIGKILL)
	require.NoError(t, c.cmd.Start())
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = c.cmd.Process.Signal(syscall.SIGCONT)
		_ = c.cmd.Process.Kill()
		<-c.done
	})
	waitFor(t, "the child's lease", func() bool {
		select {
		case <-c.done:
			t.Fatalf("the child ended: %v\n%s", c.err, c.out.String())
		default:
		}
		r, ok := readRow(t, env.Pool, id)
		return ok && r.Renewed.After(r.Started)
	})
	return c
}

// A worker process killed with SIGKILL (no release, no goodbye) is seen
// dead within TTL of its last renewal: at most TTL plus one renewal
// period after the kill.
func TestLease_KilledProcessIsSeenDeadWithinTheTTL(t *testing.T) {
	t.Parallel()
	env := setup(t)
	const ttl, renew = 3 * time.Second, time.Second
	c := startChild(t, env, "killed", ttl, renew)

	killAt := dbNow(t, env.Pool)
	require.NoError(t, c.cmd.Process.Kill())
	<-c.done
	seen := waitFor(t, "the killed process dead", func() bool { return dead(t, env.Pool, "killed") })
	r, _ := readRow(t, env.Pool, "killed")
	gap := r.Expires.Sub(killAt)
	t.Logf("dead %v after the kill on the database's clock (seen %v after it); bound TTL+Renew = %v", gap, seen, ttl+renew)
	require.LessOrEqual(t, gap, ttl+renew)
}

// A process stopped (SIGSTOP) past its lease is seen dead; continued
// (SIGCONT), it learns that it lost the lease and does not renew it.
func TestLease_StoppedProcessIsSeenDeadAndLearnsItLostTheLease(t *testing.T) {
	t.Parallel()
	env := setup(t)
	const ttl, renew = 3 * time.Second, time.Second
	c := startChild(t, env, "stopped", ttl, renew)

	stopAt := dbNow(t, env.Pool)
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGSTOP))
	seen := waitFor(t, "the stopped process dead", func() bool { return dead(t, env.Pool, "stopped") })
	before, _ := readRow(t, env.Pool, "stopped")
	gap := before.Expires.Sub(stopAt)
	t.Logf("dead %v after the stop on the database's clock (seen %v after it); bound TTL+Renew = %v", gap, seen, ttl+renew)
	require.LessOrEqual(t, gap, ttl+renew)

	require.NoError(t, c.cmd.Process.Signal(syscall.SIGCONT))
	select {
	case <-c.done:
		require.NoError(t, c.err, c.out.String())
	case <-time.After(testenv.Patience):
		t.Fatalf("the continued process did not give its lease up within %v\n%s", testenv.Patience, c.out.String())
	}
	out := c.out.String()
	t.Logf("the continued process said: %s", strings.TrimSpace(out))
	require.True(t, strings.Contains(out, "lost: "+lease.ErrExpired.Error()) || strings.Contains(out, "lost: "+lease.ErrLost.Error()), out)
	after, _ := readRow(t, env.Pool, "stopped")
	require.Equal(t, before.Renewed, after.Renewed, "the continued process renewed a lease that had expired")
	require.Equal(t, before.Expires, after.Expires)
	require.True(t, dead(t, env.Pool, "stopped"))
}
