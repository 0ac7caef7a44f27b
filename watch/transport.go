package watch

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/jobguard"
)

// Transport defaults and limits.
const (
	// PrefixDefault namespaces the Redis channel, like jobguard's markers.
	PrefixDefault = jobguard.MarkerPrefixDefault
	// ChannelDefault is the Postgres LISTEN/NOTIFY channel.
	ChannelDefault = "jobguard_reclaim_notices"
	// PostgresPayloadMax is the longest NOTIFY payload PostgreSQL accepts
	// (it must be shorter than 8000 bytes in the default configuration).
	PostgresPayloadMax = 7999
	// RedisPayloadMax bounds one Redis message. Redis would take far more;
	// the bound keeps a large reclaim from becoming one huge message.
	RedisPayloadMax = 64 << 10
)

// Redis is what the notices need of a Redis client. redis.UniversalClient
// satisfies it, so a single node, Sentinel and Cluster all work.
type Redis interface {
	Publish(ctx context.Context, channel string, message any) *redis.IntCmd
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

var _ Redis = (redis.UniversalClient)(nil)

// Transport says how notices travel: over Redis pub/sub or over Postgres
// LISTEN/NOTIFY. Set exactly one of Redis and Postgres; publishers and
// watchers must use the same settings to hear each other.
type Transport struct {
	// Redis carries notices over Redis pub/sub, on the single channel
	// "<Prefix>:reclaim-notices". Defaults to nil (not Redis).
	Redis Redis
	// Prefix namespaces the Redis channel. It is not used with Postgres.
	// Defaults to PrefixDefault.
	Prefix string
	// Postgres carries notices with LISTEN/NOTIFY. A Watcher holds one
	// connection of it for listening (taken out of the pool, so leave room
	// for one more); a Publisher runs pg_notify on it. Channels are per
	// database, so publishers and watchers must reach the same one, and the
	// listening session must be a real one (not a PgBouncer transaction
	// pool). Defaults to nil (not Postgres).
	Postgres *pgxpool.Pool
	// Channel is the LISTEN/NOTIFY channel name, an identifier of at most
	// 63 bytes; it is not used with Redis. Defaults to ChannelDefault.
	Channel string
}

// withDefaults fills in the defaults and validates t. Errors name the field.
func (t Transport) withDefaults() (Transport, error) {
	switch {
	case t.Redis != nil && t.Postgres != nil:
		return t, errors.New("Transport: both Redis and Postgres are set; choose one")
	case t.Redis == nil && t.Postgres == nil:
		return t, errors.New("Transport: neither Redis nor Postgres is set")
	}
	if t.Prefix == "" {
		t.Prefix = PrefixDefault
	}
	if t.Channel == "" {
		t.Channel = ChannelDefault
	}
	if t.Postgres != nil {
		if err := ident.Check("Transport.Channel", t.Channel); err != nil {
			return t, err
		}
	}
	if t.Redis != nil && strings.ContainsAny(t.Prefix, "*?[") {
		return t, fmt.Errorf("Transport.Prefix %q contains a glob character", t.Prefix)
	}
	return t, nil
}

// redisChannel is the one Redis channel of the transport.
func (t Transport) redisChannel() string { return t.Prefix + ":reclaim-notices" }

// Publisher sends notices to every Watcher on the same Transport.
type Publisher interface {
	// Publish sends the notices. Call it after the reclaim's write has
	// committed: a notice cancels work at once, so it must never announce a
	// reclaim that rolled back. An empty call sends nothing.
	Publish(ctx context.Context, notices ...Notice) error
}

// NewPublisher returns the Publisher of t: a *RedisPublisher or a
// *PostgresPublisher.
func NewPublisher(t Transport) (Publisher, error) {
	t, err := t.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("watch: new publisher: %w", err)
	}
	if t.Redis != nil {
		return &RedisPublisher{rdb: t.Redis, channel: t.redisChannel()}, nil
	}
	return &PostgresPublisher{pool: t.Postgres, channel: t.Channel}, nil
}

// RedisPublisher publishes notices on the transport's Redis channel, as JSON
// arrays of at most RedisPayloadMax bytes. Redis pub/sub delivers a message
// only to subscribers connected at that moment: a watcher that is
// reconnecting misses it, and finds the reclaim by its check instead.
type RedisPublisher struct {
	rdb     Redis
	channel string
}

// Publish sends the notices, one message per RedisPayloadMax bytes.
func (p *RedisPublisher) Publish(ctx context.Context, notices ...Notice) error {
	msgs, encErr := payloads(notices, RedisPayloadMax)
	for _, m := range msgs {
		if err := p.rdb.Publish(ctx, p.channel, m).Err(); err != nil {
			return fmt.Errorf("watch: publish: %w", errors.Join(err, encErr))
		}
	}
	if encErr != nil {
		return fmt.Errorf("watch: publish: %w", encErr)
	}
	return nil
}

// PostgresPublisher publishes notices with pg_notify on the transport's
// channel, as JSON arrays of at most PostgresPayloadMax bytes. PostgreSQL
// delivers notifications only to sessions listening at commit time.
type PostgresPublisher struct {
	pool    *pgxpool.Pool
	channel string
}

// notifySQL sends every payload of $2 on channel $1 in one statement, so a
// batch is one round trip and, outside a transaction, one commit.
const notifySQL = `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`

// Publish sends the notices on the transport's pool.
func (p *PostgresPublisher) Publish(ctx context.Context, notices ...Notice) error {
	return p.PublishOn(ctx, p.pool, notices...)
}

// PublishOn sends the notices through db. Given the reclaim's own pgx.Tx,
// the notices are delivered when, and only if, that transaction commits.
func (p *PostgresPublisher) PublishOn(ctx context.Context, db jobguard.DB, notices ...Notice) error {
	msgs, encErr := payloads(notices, PostgresPayloadMax)
	if len(msgs) > 0 {
		tag, err := db.Exec(ctx, notifySQL, p.channel, msgs)
		if err != nil {
			return fmt.Errorf("watch: publish: %w", errors.Join(err, encErr))
		}
		if n := tag.RowsAffected(); n != int64(len(msgs)) {
			return fmt.Errorf("watch: publish: %d of %d payloads sent", n, len(msgs))
		}
	}
	if encErr != nil {
		return fmt.Errorf("watch: publish: %w", encErr)
	}
	return nil
}
