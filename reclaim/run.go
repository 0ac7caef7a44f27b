package reclaim

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// acquirer is the part of *pgxpool.Pool that Run needs to hold the leader
// lock on a connection of its own.
type acquirer interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}

// Run sweeps every Interval until ctx ends, then returns nil. Across any
// number of instances with the same LeaderKey only one sweeps: the one that
// holds a Postgres session-level advisory lock on a dedicated connection of
// Config.DB (which must be a *pgxpool.Pool with room for one more
// connection). The lock goes with the session, so when the leader stops, or
// its connection dies, a standby takes the lock at its next tick, within one
// Interval. Run starts no goroutines; on return the connection is closed and
// the lock released.
func (r *Reclaimer) Run(ctx context.Context) error {
	pool := r.cfg.DB
	if n := pool.Config().MaxConns; n < 2 {
		// The lock holds one connection for as long as it leads; a sweep
		// would wait for a second one forever.
		return fmt.Errorf("reclaim: run: Config.DB allows %d connection; Run needs at least 2", n)
	}
	var lock *pgxpool.Conn
	defer func() { r.drop(ctx, lock) }()
	tick := time.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	for {
		lock = r.lead(ctx, pool, lock)
		if lock != nil && ctx.Err() == nil {
			// Sweep logs its own summary: one line per interval, from the
			// leader only, so an operator sees that sweeps happen even when
			// they change nothing.
			_, _ = r.Sweep(ctx)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// lead returns the connection holding the leader lock, or nil when another
// instance leads. A held connection is checked first: a dead one loses the
// lead (the server has released its lock) and the lock is tried again.
func (r *Reclaimer) lead(ctx context.Context, pool acquirer, held *pgxpool.Conn) *pgxpool.Conn {
	if held != nil {
		if _, err := held.Exec(ctx, "SELECT 1"); err == nil {
			return held
		} else if ctx.Err() == nil {
			r.log.WarnContext(ctx, "reclaim: leader connection lost; leadership dropped", slog.Any("error", err))
		}
		r.dropDead(ctx, held)
	}
	if ctx.Err() != nil {
		return nil
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.log.WarnContext(ctx, "reclaim: cannot get a connection for the leader lock", slog.Any("error", err))
		}
		return nil
	}
	var got bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", r.cfg.LeaderKey).Scan(&got); err != nil {
		if ctx.Err() == nil {
			r.log.WarnContext(ctx, "reclaim: cannot try the leader lock", slog.Any("error", err))
		}
		r.dropDead(ctx, conn)
		return nil
	}
	if !got {
		conn.Release()
		return nil
	}
	r.log.InfoContext(ctx, "reclaim: leading the sweeps", slog.Int64("leader_key", r.cfg.LeaderKey))
	return conn
}

// drop gives up the lead: it unlocks and returns the connection to the
// pool, or, when that fails (the connection is dead), closes it, since
// ending the session releases a session-level advisory lock too. It runs
// also after ctx has ended.
func (r *Reclaimer) drop(ctx context.Context, c *pgxpool.Conn) {
	if c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	var unlocked bool
	if err := c.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", r.cfg.LeaderKey).Scan(&unlocked); err == nil && unlocked {
		c.Release()
		return
	}
	_ = c.Hijack().Close(ctx) // the session ends either way
}

// dropDead closes a connection that failed: ending the session releases
// any lock it held.
func (r *Reclaimer) dropDead(ctx context.Context, c *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = c.Hijack().Close(ctx)
}
