package reclaim_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/netproxy"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/lease"
	"github.com/jobguard/jobguard/reclaim"
)

// commitGate makes a sweep's COMMIT reach the server and its answer never
// reach the sweep. A deferred trigger holds every commit that changes a
// job's status at an advisory lock the test holds; once one waits there,
// the path between the sweep and the server freezes (netproxy), the
// sweep's context ends, and the gate opens: the server commits (or, with
// refuse, fails the commit) while the sweep's connection is given up, its
// cancel request held on the frozen path with everything else. Then the
// path thaws, for what the sweep does next.
type commitGate struct {
	env  *testenv.Env
	key  int64
	conn *pgxpool.Conn // holds the lock
	path *netproxy.Proxy
	// Pool reaches the server through the path: the sweep's.
	Pool *pgxpool.Pool
}

// gateCommits installs the gate on the test's jobs table, closed.
func gateCommits(t *testing.T, env *testenv.Env) *commitGate {
	t.Helper()
	ctx := context.Background()
	g := &commitGate{env: env, key: 1 + rand.Int64N(1<<30)}
	env.Exec(fmt.Sprintf(`
CREATE TABLE commit_refused (at timestamptz);
CREATE FUNCTION commit_gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(%d);
    IF EXISTS (SELECT FROM commit_refused) THEN RAISE EXCEPTION 'commit refused at the gate'; END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER commit_gate AFTER UPDATE ON jobs DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status) EXECUTE FUNCTION commit_gate();`, g.key))
	conn, err := env.Pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, g.key)
	require.NoError(t, err)
	g.conn = conn
	t.Cleanup(func() {
		_, _ = conn.Exec(ctx, `SELECT pg_advisory_unlock_all()`)
		conn.Release()
	})
	u, err := url.Parse(env.DatabaseURL)
	require.NoError(t, err)
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	g.path = netproxy.New(t, target)
	u.Host = g.path.Addr()
	g.Pool, err = pgxpool.New(ctx, u.String())
	require.NoError(t, err)
	t.Cleanup(g.Pool.Close)
	return g
}

// run sweeps r, whose DB must be g.Pool, through the gate.
func (g *commitGate) run(t *testing.T, r *reclaim.Reclaimer, refuse bool) (reclaim.Report, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opened := make(chan error, 1)
	go func() { opened <- g.intercept(cancel, refuse) }()
	rep, err := r.Sweep(ctx)
	require.NoError(t, <-opened)
	return rep, err
}

// intercept waits for a commit at the gate, freezes the path, cancels the
// sweep, opens the gate, waits for the held transaction to end, and thaws
// the path.
func (g *commitGate) intercept(cancel context.CancelFunc, refuse bool) error {
	ctx := context.Background()
	var pid int32
	for deadline := time.Now().Add(30 * time.Second); pid == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("no commit reached the gate")
		}
		err := g.env.Pool.QueryRow(ctx, `SELECT coalesce(max(pid), 0) FROM pg_locks
			WHERE locktype = 'advisory' AND classid = 0 AND objid = $1 AND NOT granted`, g.key).Scan(&pid)
		if err != nil {
			return err
		}
	}
	g.path.Freeze()
	defer g.path.Thaw()
	cancel()
	if refuse {
		if _, err := g.env.Pool.Exec(ctx, `INSERT INTO commit_refused VALUES (now())`); err != nil {
			return err
		}
	}
	if _, err := g.conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, g.key); err != nil {
		return err
	}
	// The held transaction has ended once its backend no longer waits at
	// the gate nor holds a transaction open.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the commit held at the gate did not end")
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

// A reclaim whose COMMIT reached the server while the sweep's context
// ended, so that the sweep never heard it commit, is announced all the
// same: the sweep reads the rows back once that transaction has ended, and
// writes the markers and publishes the notices of what committed, and
// counts it.
func TestSweep_ReclaimCommittedUnheardIsAnnounced(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{Generation: 3, UpdatedAgo: 2 * time.Hour})
	gate := gateCommits(t, env)
	pub := &recorder{}
	r, logs := newReclaimer(t, jobs, reclaim.Config{DB: gate.Pool, Notices: pub})

	rep, err := gate.run(t, r, false)
	require.Error(t, err, "the sweep's context ended during its commit")
	require.Eventually(t, func() bool { return jobs.Read(t, id).Status == jobs.Table.Statuses.Failed },
		30*time.Second, 10*time.Millisecond, "the server commits the reclaim")
	require.Equal(t, []string{id}, rep.ReclaimedIDs, logs.String())
	require.Equal(t, []jobguard.Execution{{JobID: id, Generation: 3}}, pub.execs)
	require.True(t, hasMarker(t, jobs, id), "a committed reclaim gets its Redis marker")
}

// The same with the markers in Postgres: the reclaim and its markers
// commit in one transaction, whose COMMIT the sweep never hears.
func TestSweep_ReclaimCommittedUnheardInATransactionIsAnnounced(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	guard := jobs.NoRedis(t)
	id := jobs.Insert(t, fixture.Job{Generation: 3, UpdatedAgo: 2 * time.Hour})
	gate := gateCommits(t, env)
	pub := &recorder{}
	r, err := reclaim.New(reclaim.Config{Guard: guard, DB: gate.Pool, Notices: pub,
		Limits: reclaim.StaticLimits{"chapter": 30 * time.Minute}})
	require.NoError(t, err)

	rep, err := gate.run(t, r, false)
	require.Error(t, err, "the sweep's context ended during its commit")
	require.Equal(t, []string{id}, rep.ReclaimedIDs)
	require.Equal(t, []jobguard.Execution{{JobID: id, Generation: 3}}, pub.execs)
	store, err := marker.NewPostgresStore(guard, marker.Config{})
	require.NoError(t, err)
	_, found, err := store.Read(context.Background(), env.Pool, id)
	require.NoError(t, err)
	require.True(t, found, "the marker committed with the reclaim")
}

// A rescue whose write committed unheard is announced the same way: the
// notice names the generation that lost the job.
func TestSweep_RescueCommittedUnheardIsAnnounced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := rescueSetup(t)
	dead := b.startLease(t, lease.Config{})
	orphan := b.startUnder(t, dead)
	require.NoError(t, dead.Stop(ctx))
	gate := gateCommits(t, b.env)
	notes := &recorder{}
	r, logs := newReclaimer(t, b.jobs, reclaim.Config{DB: gate.Pool, Workers: &lease.Workers{}, Notices: notes,
		Limits: reclaim.StaticLimits{"chapter": time.Hour}})

	rep, err := gate.run(t, r, false)
	require.Error(t, err, "the sweep's context ended during its commit")
	require.Eventually(t, func() bool { return b.jobs.Read(t, orphan.JobID).Status == b.jobs.Table.Statuses.Queued },
		30*time.Second, 10*time.Millisecond, "the server commits the rescue")
	require.Equal(t, []string{orphan.JobID}, rep.RescuedIDs, logs.String())
	require.Equal(t, []jobguard.Execution{orphan}, notes.execs)
}

// A reclaim whose COMMIT the sweep gave up on, and that then failed, is
// not announced: the rows read back are as they were.
func TestSweep_ReclaimRolledBackUnheardIsNotAnnounced(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	jobs := fixture.Create(t, env, fixture.Default)
	id := jobs.Insert(t, fixture.Job{Generation: 3, UpdatedAgo: 2 * time.Hour})
	gate := gateCommits(t, env)
	pub := &recorder{}
	r, _ := newReclaimer(t, jobs, reclaim.Config{DB: gate.Pool, Notices: pub})

	rep, err := gate.run(t, r, true)
	require.Error(t, err, "the sweep's context ended during its commit")
	require.Empty(t, rep.ReclaimedIDs)
	require.Empty(t, pub.execs)
	require.False(t, hasMarker(t, jobs, id))
	require.Equal(t, jobs.Table.Statuses.Processing, jobs.Read(t, id).Status, "the commit failed")
}
