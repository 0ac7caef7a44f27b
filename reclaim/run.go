package reclaim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/interval"
	"github.com/jobguard/jobguard/internal/safe"
)

// LivenessTimeoutDefault is the default of Config.LivenessTimeout: far
// above a healthy round trip, connection set-up included, and short beside
// the default Interval.
const LivenessTimeoutDefault = 10 * time.Second

// Run sweeps every Interval until ctx ends, then returns nil. Across any
// number of instances with the same Shared.LeaderKey (their Guard's) only
// one sweeps: the one that holds a Postgres session-level advisory lock.
// Shadow instances (Config.Shadow) contend for a lock of their own. Each instance keeps a
// connection of its own for the lock, outside Config.DB but opened with its
// connection settings (and its BeforeConnect hook), so the lock takes no
// room in the pool.
//
// The lock goes with the session. When the leader stops or its connection
// dies, the server releases the lock at once. When the leader's path goes
// silent instead (a half-open connection: no bytes, no reset; or a stopped
// process), the server ends the session once it has been idle for
// Interval + SweepTimeout + LivenessTimeout (idle_session_timeout, set on
// the lock's session only), which a leader that works never is: it checks
// its session before every sweep. A standby tries the lock every Interval,
// so one that can reach the server leads within
//
//	2×Interval + SweepTimeout + 3×LivenessTimeout
//
// of the leader's last contact with the server: the idle timeout, up to an
// Interval until a standby's next try, and its connect and lock, each
// within LivenessTimeout. That needs PostgreSQL 14
// or later; on an older server Run logs a warning, and a silent leader is
// replaced only when TCP keepalives, set on the lock's session too, find its
// path dead — never while its process is stopped.
//
// LivenessTimeout bounds every round trip of the lock: connecting, trying
// the lock, the check before a sweep, and the unlock at the end. A leader
// whose check fails or times out closes its connection, stops sweeping and
// tries the lock again like a standby. A leader whose lock connection froze
// while its pool still works may go on with a sweep under way while a
// standby starts: two sweeps at once are safe, because every reclaim write
// is conditional and a job is reclaimed once.
//
// A panic in Run's loop (a logger's, a meter's, a BeforeConnect hook's) is
// logged at error with its stack, and the loop goes on at the next
// Interval; the code a sweep runs for each item (parent rules, the
// notifier, the source) fails only its own items, as Sweep says.
//
// Run leaves no goroutine behind. When it returns, the lock is released
// (within LivenessTimeout) and its connection closed.
func (r *Reclaimer) Run(ctx context.Context) error {
	l := &leaderLock{r: r}
	defer l.close(ctx)
	tick := time.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	for {
		// A panic of the logger, the meter or a connect hook must not end
		// the loop; the handed code a sweep runs fails on its own.
		err := safe.Call(func() error {
			if l.lead(ctx) && ctx.Err() == nil {
				// Sweep logs its own summary: one line per interval, from
				// the leader only, so an operator sees that sweeps happen
				// even when they change nothing.
				_, _ = r.Sweep(ctx)
			}
			return nil
		})
		safe.Recovered(ctx, r.log, "reclaim: run recovered from a panic", err)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// leaderLock is one instance's claim on the leader lock: a connection of
// its own, kept between attempts, and whether its session holds the lock.
type leaderLock struct {
	r      *Reclaimer
	conn   *pgx.Conn
	held   bool
	warned bool // the server has no idle_session_timeout; said once
}

// lead reports whether this instance leads now. A held lock is checked
// first: a session that does not answer within LivenessTimeout loses the
// lead at once (the server ends it, and releases its lock, soon after if not
// already), and the lock is tried again.
func (l *leaderLock) lead(ctx context.Context) bool {
	if l.held {
		err := l.roundTrip(ctx, func(ctx context.Context) error {
			_, err := l.conn.Exec(ctx, "SELECT 1")
			return err
		})
		if err == nil {
			return true
		}
		// The lead is dropped before it is told.
		l.closeConn(ctx)
		if ctx.Err() == nil {
			l.r.log.WarnContext(ctx, "reclaim: leader connection lost; leadership dropped", slog.Any("error", err))
		}
	}
	if ctx.Err() != nil {
		return false
	}
	if l.conn == nil {
		if err := l.connect(ctx); err != nil {
			if ctx.Err() == nil {
				l.r.log.WarnContext(ctx, "reclaim: cannot connect for the leader lock", slog.Any("error", err))
			}
			return false
		}
	}
	var got bool
	err := l.roundTrip(ctx, func(ctx context.Context) error {
		return l.conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", l.r.leaderKey()).Scan(&got)
	})
	if err != nil {
		l.closeConn(ctx)
		if ctx.Err() == nil {
			l.r.log.WarnContext(ctx, "reclaim: cannot try the leader lock", slog.Any("error", err))
		}
		return false
	}
	if got {
		l.held = true
		l.r.log.LogAttrs(ctx, slog.LevelInfo, "reclaim: leading the sweeps", l.r.LeaderAttrs()...)
	}
	return got
}

// connect opens the lock's connection and makes its session one that the
// server ends when it stops talking.
func (l *leaderLock) connect(ctx context.Context) error {
	cfg := l.r.cfg
	pool := cfg.DB.Config()
	conf := pool.ConnConfig.Copy()
	if conf.RuntimeParams == nil {
		conf.RuntimeParams = map[string]string{}
	}
	// Belt and braces for a path that dies: the server probes an idle
	// session every LivenessTimeout and drops one whose unacknowledged data
	// or probes have waited longer than the idle timeout. These are the only
	// bound on a server without idle_session_timeout. They see a dead path,
	// not a stopped client, whose kernel still answers the probes.
	// Every value is one the server takes (a setting out of its range
	// refuses the connection) and the kernel keeps.
	probe := interval.Keepalive(cfg.LivenessTimeout)
	conf.RuntimeParams["tcp_keepalives_idle"] = probe
	conf.RuntimeParams["tcp_keepalives_interval"] = probe
	conf.RuntimeParams["tcp_keepalives_count"] = "3"
	conf.RuntimeParams["tcp_user_timeout"] = interval.Millis(l.idleTimeout())
	return l.roundTrip(ctx, func(ctx context.Context) error {
		if pool.BeforeConnect != nil {
			if err := pool.BeforeConnect(ctx, conf); err != nil {
				return fmt.Errorf("before connect: %w", err)
			}
		}
		conn, err := pgx.ConnectConfig(ctx, conf)
		if err != nil {
			return err
		}
		// A server older than 14 lacks the setting: no row, no error. It is
		// set by a statement rather than in the startup packet, where an
		// unknown setting refuses the connection.
		var set string
		err = conn.QueryRow(ctx, `SELECT set_config(name, $1, false) FROM pg_settings WHERE name = 'idle_session_timeout'`,
			interval.Millis(l.idleTimeout())).Scan(&set)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			if !l.warned {
				l.warned = true
				l.r.log.WarnContext(ctx, "reclaim: the server has no idle_session_timeout (PostgreSQL 13 or older); "+
					"a leader whose path goes silent is replaced only when TCP keepalives find it dead",
					slog.Duration("idle_timeout", l.idleTimeout()))
			}
		case err != nil:
			_ = conn.Close(ctx)
			return fmt.Errorf("set idle_session_timeout: %w", err)
		}
		l.conn = conn
		return nil
	})
}

// idleTimeout is how long the lock's session may stay silent before the
// server ends it. A working leader's session is silent from one check to
// the next: at most an Interval, or a check and a sweep when they outlast
// one (the ticker then fires at once), so less than this. The one excess is
// a sweep's markers and notices, which may run afterCommitTimeout past its
// deadline: should they outlast an Interval, the leader loses its session
// and the lead, is told at its next check, and someone leads again.
//
// The sum saturates, and the setting holds at most about 24 days: a
// longer bound is that.
func (l *leaderLock) idleTimeout() time.Duration {
	c := l.r.cfg
	return interval.Sum(c.Interval, c.SweepTimeout, c.LivenessTimeout)
}

// roundTrip runs fn with a deadline of LivenessTimeout.
func (l *leaderLock) roundTrip(ctx context.Context, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, l.r.cfg.LivenessTimeout)
	defer cancel()
	return fn(ctx)
}

// close gives up the lead: it unlocks, so that a standby can lead at its
// next tick, and closes the connection, which releases the lock anyway
// when the unlock fails. It runs also after ctx has ended.
func (l *leaderLock) close(ctx context.Context) {
	if l.conn == nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	if l.held {
		_ = l.roundTrip(ctx, func(ctx context.Context) error {
			_, err := l.conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", l.r.leaderKey())
			return err
		})
	}
	l.closeConn(ctx)
}

// closeConn closes the connection: ending the session releases any lock it
// held. Closing sends one message and waits for nothing.
func (l *leaderLock) closeConn(ctx context.Context) {
	_ = l.roundTrip(context.WithoutCancel(ctx), l.conn.Close)
	l.conn, l.held = nil, false
}

// shadowKeyMask turns a leader key into the shadow instances' key: the
// same key with its top bit flipped, so that shadow and live reclaimers of
// one table never contend for one lock, and each kind elects one leader.
const shadowKeyMask = -1 << 63

// leaderKey is the advisory lock key Run contends for.
func (r *Reclaimer) leaderKey() int64 {
	key := r.cfg.Guard.Shared().LeaderKey
	if r.cfg.Shadow {
		key ^= shadowKeyMask
	}
	return key
}

// LeaderAttrs are the log attributes that name the advisory lock key Run
// contends for: leader_key, and for a shadow reclaimer also
// live_leader_key (the guard's Shared.LeaderKey, which the live reclaimers
// contend for) and leader_key_derived, which says how the two differ and
// why. Run's line on taking the lead carries them; a service's own start
// line may too, so that an operator looking for the lock in pg_locks finds
// the key it is really held on.
func (r *Reclaimer) LeaderAttrs() []slog.Attr {
	attrs := []slog.Attr{slog.Int64("leader_key", r.leaderKey())}
	if r.cfg.Shadow {
		attrs = append(attrs, slog.Int64("live_leader_key", r.cfg.Guard.Shared().LeaderKey),
			slog.String("leader_key_derived", "the live leader key with its top bit flipped: shadow reclaimers "+
				"elect a leader of their own and never take the live reclaimers' lock"))
	}
	return attrs
}
