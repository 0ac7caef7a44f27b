package lease_test

import (
	"context"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/netproxy"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/lease"
)

// setup gives the test a schema with the workers table.
func setup(t *testing.T) *testenv.Env {
	t.Helper()
	env := testenv.New(t)
	env.Exec(lease.Migration)
	return env
}

// row is a lease's row, its times on the database's clock.
type row struct {
	Host     string
	PID      int
	Started  time.Time
	Renewed  time.Time
	Expires  time.Time
	Left     time.Duration // expires_at - now()
	SinceNow time.Duration // now() - renewed_at
}

func readRow(t *testing.T, db lease.DB, id string) (row, bool) {
	t.Helper()
	var r row
	var left, since float64
	err := db.QueryRow(context.Background(), `SELECT host, pid, started_at, renewed_at, expires_at,
		extract(epoch FROM expires_at - now()), extract(epoch FROM now() - renewed_at)
		FROM jobguard_workers WHERE id = $1`, id).
		Scan(&r.Host, &r.PID, &r.Started, &r.Renewed, &r.Expires, &left, &since)
	if err == pgx.ErrNoRows {
		return r, false
	}
	require.NoError(t, err)
	r.Left = time.Duration(left * float64(time.Second))
	r.SinceNow = time.Duration(since * float64(time.Second))
	return r, true
}

// dbNow is the database's clock.
func dbNow(t *testing.T, db lease.DB) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, db.QueryRow(context.Background(), `SELECT now()`).Scan(&now))
	return now
}

// dead reports whether id's lease is dead.
func dead(t *testing.T, db lease.DB, id string) bool {
	t.Helper()
	ids, err := lease.Workers{}.Dead(context.Background(), db, []string{id})
	require.NoError(t, err)
	return len(ids) == 1
}

// waitFor polls cond until it holds, for up to testenv.Patience, and
// returns how long that took.
func waitFor(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > testenv.Patience {
			t.Fatalf("%s: not within %v", what, testenv.Patience)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// waitRenewed waits until id's lease has been renewed since it was taken.
func waitRenewed(t *testing.T, db lease.DB, id string) {
	t.Helper()
	waitFor(t, "a renewal of "+id, func() bool {
		r, ok := readRow(t, db, id)
		return ok && r.Renewed.After(r.Started)
	})
}

// startLease starts a lease on db, stopped at cleanup.
func startLease(t *testing.T, db lease.DB, cfg lease.Config) *lease.Lease {
	t.Helper()
	l, err := lease.New(db, cfg)
	require.NoError(t, err)
	require.NoError(t, l.Start(context.Background()))
	t.Cleanup(func() { _ = l.Stop(context.Background()) })
	return l
}

// through opens a pool on env's schema whose every connection passes a
// proxy the test controls. The proxy is cut before the pool closes, so
// that closing does not wait on a frozen path.
func through(t *testing.T, env *testenv.Env) (*pgxpool.Pool, *netproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(env.DatabaseURL)
	require.NoError(t, err)
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	path := netproxy.New(t, target)
	u.Host = path.Addr()
	pool, err := pgxpool.New(context.Background(), u.String())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	t.Cleanup(path.Close)
	return pool, path
}
