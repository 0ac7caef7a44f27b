package watch

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/pgarray"
	"github.com/jobguard/jobguard/jobguard"
)

// Transport defaults and limits.
const (
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
// watchers must use the same one to hear each other. The channel's name is
// the guard's: "<Shared.Prefix>:reclaim-notices" on Redis,
// Shared.NoticeChannel on Postgres.
type Transport struct {
	// Redis carries notices over Redis pub/sub. Defaults to nil (not Redis).
	Redis Redis
	// Postgres carries notices with LISTEN/NOTIFY. A Watcher holds one
	// connection of it for listening (taken out of the pool, so leave room
	// for one more); a Publisher runs pg_notify on it. Channels are per
	// database, so publishers and watchers must reach the same one, and the
	// listening session must be a real one (not a PgBouncer transaction
	// pool). Defaults to nil (not Postgres).
	Postgres *pgxpool.Pool
}

// channel validates t and returns the name of its channel under guard's
// shared settings (which the guard validated). Errors name the field.
func (t Transport) channel(guard *jobguard.Guard) (string, error) {
	shared := guard.Shared()
	switch {
	case t.Redis != nil && t.Postgres != nil:
		return "", errors.New("Transport: both Redis and Postgres are set; choose one")
	case t.Redis == nil && t.Postgres == nil:
		return "", errors.New("Transport: neither Redis nor Postgres is set")
	case t.Postgres != nil:
		return shared.NoticeChannel, nil
	}
	return shared.Prefix + ":reclaim-notices", nil
}

// ErrNotTransactional is returned by PublishOn on a Redis transport:
// Redis pub/sub cannot wait for a database transaction to commit.
var ErrNotTransactional = errors.New("watch: a Redis transport cannot publish inside a transaction")

// Publisher sends notices to every Watcher on the same Transport and the
// same shared settings, each notice naming the publisher's jobs table
// (jobguard.Guard.TableKey), which the watchers of other tables ignore: as
// JSON
// arrays of at most RedisPayloadMax bytes on the transport's Redis channel,
// or with pg_notify on its Postgres channel, at most PostgresPayloadMax
// bytes each. Redis pub/sub delivers a message only to subscribers
// connected at that moment, and PostgreSQL a notification only to sessions
// listening when it commits: a watcher that is reconnecting misses it, and
// finds the reclaim by its check instead. It satisfies reclaim.Notifier.
// Create it with NewPublisher.
type Publisher struct {
	guard   *jobguard.Guard // names each notice's job by its canonical id
	t       Transport
	channel string
	table   string // the guard's TableKey, which every notice names
}

// NewPublisher returns the publisher of t, on the channel that guard's
// Shared settings name.
func NewPublisher(guard *jobguard.Guard, t Transport) (*Publisher, error) {
	if guard == nil {
		return nil, errors.New("watch: new publisher: guard is nil")
	}
	channel, err := t.channel(guard)
	if err != nil {
		return nil, fmt.Errorf("watch: new publisher: %w", err)
	}
	return &Publisher{guard: guard, t: t, channel: channel, table: guard.TableKey()}, nil
}

// encode names each notice's job by its canonical id, as every key the
// library writes does, and encodes them as payloads of at most limit bytes.
// A notice whose id the jobs table cannot hold (jobguard.ErrInvalidJobID)
// or that cannot fit is left out and reported in the joined error.
func (p *Publisher) encode(notices []Notice, limit int, cancelled bool) ([]string, error) {
	var errs []error
	valid := make([]Notice, 0, len(notices))
	for _, n := range notices {
		id, err := p.guard.CanonicalID(n.JobID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		n.JobID = id
		valid = append(valid, n)
	}
	msgs, err := payloadsOf(p.table, valid, limit, cancelled)
	return msgs, errors.Join(append(errs, err)...)
}

// notifySQL sends every payload of $2 on channel $1 in one statement, so a
// batch is one round trip and, outside a transaction, one commit.
const notifySQL = `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`

// Publish sends the notices. Call it after the reclaim's write has
// committed: a notice cancels work at once, so it must never announce a
// reclaim that rolled back. An empty call sends nothing.
func (p *Publisher) Publish(ctx context.Context, notices ...Notice) error {
	return p.publish(ctx, false, notices)
}

// PublishCancelled is Publish for the executions an operator's cancel
// took the job from (what jobguard.Guard.Cancel returns): the watchers'
// LostError says "cancelled" and wraps jobguard.ErrCancelled. Cancel sends
// its notice over Postgres itself, in its own statement; on a Redis
// transport, call this once the cancel has committed.
func (p *Publisher) PublishCancelled(ctx context.Context, notices ...Notice) error {
	return p.publish(ctx, true, notices)
}

// publish is Publish, the notices saying whether they are cancels.
func (p *Publisher) publish(ctx context.Context, cancelled bool, notices []Notice) error {
	if p.t.Postgres != nil {
		return p.publishOn(ctx, p.t.Postgres, cancelled, notices)
	}
	msgs, encErr := p.encode(notices, RedisPayloadMax, cancelled)
	for _, m := range msgs {
		if err := p.t.Redis.Publish(ctx, p.channel, m).Err(); err != nil {
			return fmt.Errorf("watch: publish: %w", errors.Join(err, encErr))
		}
	}
	if encErr != nil {
		return fmt.Errorf("watch: publish: %w", encErr)
	}
	return nil
}

// PublishOn sends the notices through db, on a Postgres transport. Given
// the reclaim's own pgx.Tx, the notices are delivered when, and only if,
// that transaction commits. On a Redis transport it sends nothing and
// returns ErrNotTransactional.
func (p *Publisher) PublishOn(ctx context.Context, db jobguard.DB, notices ...Notice) error {
	return p.publishOn(ctx, db, false, notices)
}

// publishOn is PublishOn, the notices saying whether they are cancels.
func (p *Publisher) publishOn(ctx context.Context, db jobguard.DB, cancelled bool, notices []Notice) error {
	if p.t.Postgres == nil {
		return ErrNotTransactional
	}
	msgs, encErr := p.encode(notices, PostgresPayloadMax, cancelled)
	if len(msgs) > 0 {
		tag, err := db.Exec(ctx, notifySQL, p.channel, pgarray.Of(msgs))
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
