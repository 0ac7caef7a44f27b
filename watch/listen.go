package watch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/ident"
)

// listener holds one subscription session: it subscribes, calls subscribed
// once the server has confirmed the subscription, hands every payload to
// deliver, and returns when the session ends (ctx done, or the connection
// failed or stopped answering pings). It is called again to reconnect.
type listener interface {
	session(ctx context.Context, subscribed func(), deliver func(payload string)) error
}

// errNoPong ends a session whose server answered neither a message nor a
// ping for two ping intervals: the connection is presumed dead.
var errNoPong = errors.New("no answer to a ping")

type redisListener struct {
	rdb     Redis
	channel string
	ping    time.Duration
}

func (l redisListener) session(ctx context.Context, subscribed func(), deliver func(string)) error {
	ps := l.rdb.Subscribe(ctx, l.channel)
	// Receive does not watch ctx; closing the PubSub is what unblocks it.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer func() {
		stop()
		_ = ps.Close()
	}()
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, l.ping)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				return err
			}
			if pinged {
				return errNoPong
			}
			if err := ps.Ping(ctx); err != nil {
				return err
			}
			pinged = true
			continue
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				subscribed()
			}
		case *redis.Message:
			deliver(m.Payload)
		}
	}
}

type postgresListener struct {
	pool    *pgxpool.Pool
	channel string
	ping    time.Duration
}

func (l postgresListener) session(ctx context.Context, subscribed func(), deliver func(string)) error {
	pc, err := l.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A LISTENing session must not go back to the pool: the connection is
	// ours until the session ends, then closed.
	conn := pc.Hijack()
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, "LISTEN "+ident.Quote(l.channel)); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	subscribed()
	for {
		wctx, cancel := context.WithTimeout(ctx, l.ping)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if n != nil {
			deliver(n.Payload)
		}
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil:
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			// Quiet for a ping interval: make sure the session is alive.
			pctx, cancel := context.WithTimeout(ctx, l.ping)
			_, err := conn.Exec(pctx, "SELECT 1")
			cancel()
			if err != nil {
				return fmt.Errorf("%w: %w", errNoPong, err)
			}
		default:
			return err
		}
	}
}
