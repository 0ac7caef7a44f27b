// Package commitgate makes a write's COMMIT reach PostgreSQL while its
// answer never reaches the writer: the fault that leaves a writer unsure
// whether what it sent committed.
//
// A deferred trigger on the jobs table holds, at COMMIT, every transaction
// that changed a row's status, waiting for an advisory lock the test
// holds. The writer reaches the server through a netproxy path. Once a
// commit waits at the gate, Intercept freezes the path, lets the test
// break the writer off (its context ends, or the path is reset), opens the
// gate so that the server commits (or, refused, fails the commit), waits
// for the held transaction to end, and thaws the path: the writer's cancel
// request, held on the frozen path, reaches the server only after the
// outcome is decided, and whatever the writer does next finds the path
// open.
package commitgate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/internal/testkit/netproxy"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
)

// Gate is a closed gate on one jobs table.
type Gate struct {
	env  *testenv.Env
	key  int64
	conn *pgxpool.Conn // holds the lock
	path *netproxy.Proxy
	// URL reaches the test's schema through the path: the writer's.
	URL string
	// Pool is a pool on URL, closed at the test's cleanup.
	Pool *pgxpool.Pool
}

// New installs a closed gate on table (a quoted, possibly qualified name
// in env's schema) and opens the path to env's server.
func New(t testing.TB, env *testenv.Env, table string) *Gate {
	t.Helper()
	ctx := context.Background()
	g := &Gate{env: env, key: 1 + rand.Int64N(1<<30)}
	env.Exec(fmt.Sprintf(`
CREATE TABLE commit_refused (at timestamptz);
CREATE FUNCTION commit_gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(%d);
    IF EXISTS (SELECT FROM commit_refused) THEN RAISE EXCEPTION 'commit refused at the gate'; END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER commit_gate AFTER UPDATE ON %s DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status) EXECUTE FUNCTION commit_gate();`, g.key, table))
	conn, err := env.Pool.Acquire(ctx)
	if err != nil {
		t.Fatalf("commitgate: %v", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, g.key); err != nil {
		conn.Release()
		t.Fatalf("commitgate: %v", err)
	}
	g.conn = conn
	t.Cleanup(func() {
		_, _ = conn.Exec(ctx, `SELECT pg_advisory_unlock_all()`)
		conn.Release()
	})
	u, err := url.Parse(env.DatabaseURL)
	if err != nil {
		t.Fatalf("commitgate: %v", err)
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	g.path = netproxy.New(t, target)
	u.Host = g.path.Addr()
	g.URL = u.String()
	if g.Pool, err = pgxpool.New(ctx, g.URL); err != nil {
		t.Fatalf("commitgate: %v", err)
	}
	t.Cleanup(g.Pool.Close)
	return g
}

// Cut resets every connection on the path, as a failed network does.
func (g *Gate) Cut() { g.path.Reset() }

// Intercept waits for a commit at the gate, freezes the path, calls
// breakOff (which ends the writer's wait: cancel its context, or Cut),
// opens the gate (the held commit fails when refuse is set), waits for
// the held transaction to end, and thaws the path.
func (g *Gate) Intercept(breakOff func(), refuse bool) error {
	ctx := context.Background()
	var pid int32
	for deadline := time.Now().Add(testenv.Patience); pid == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("commitgate: no commit reached the gate")
		}
		err := g.env.Pool.QueryRow(ctx, `SELECT coalesce(max(pid), 0) FROM pg_locks
			WHERE locktype = 'advisory' AND classid = 0 AND objid = $1 AND NOT granted`, g.key).Scan(&pid)
		if err != nil {
			return err
		}
	}
	g.path.Freeze()
	defer g.path.Thaw()
	breakOff()
	if refuse {
		if _, err := g.env.Pool.Exec(ctx, `INSERT INTO commit_refused VALUES (now())`); err != nil {
			return err
		}
	}
	if _, err := g.conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, g.key); err != nil {
		return err
	}
	// The held transaction has ended once its session holds none open.
	for deadline := time.Now().Add(testenv.Patience); ; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("commitgate: the commit held at the gate did not end")
		}
		var open bool
		err := g.env.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE pid = $1 AND backend_xid IS NOT NULL)`, pid).Scan(&open)
		if err != nil {
			return err
		}
		if !open {
			return nil
		}
	}
}
