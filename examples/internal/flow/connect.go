package flow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redact"
	"github.com/jobguard/jobguard/watch"
)

// Conns are an example process's connections, and the background loops it
// runs over them until Close.
type Conns struct {
	// Pool reaches the schema (it is every connection's search_path).
	Pool *pgxpool.Pool
	// Redis holds the reclaim markers.
	Redis *redis.Client
	// Schema holds every table.
	Schema string

	notices string
	stops   []func()
}

// Connect connects to PostgreSQL, with cfg's schema as the search_path of
// every connection, and to Redis; creates the schema when missing; and
// applies the library's migrations and the examples' product tables. Close
// the Conns when done.
//
// Its errors hold no password of either URL: a parser's error may quote the
// URL it failed on.
func Connect(ctx context.Context, cfg Config) (*Conns, error) {
	cfg = cfg.withDefaults()
	conns, err := dial(ctx, cfg)
	return conns, redact.New(cfg.DatabaseURL, cfg.RedisURL).Error(err)
}

// dial is Connect without the redaction of its errors.
func dial(ctx context.Context, cfg Config) (*Conns, error) {
	switch cfg.Notices {
	case NoticesRedis, NoticesPostgres, NoticesOff:
	default:
		return nil, fmt.Errorf("notices %q: want %s, %s or %s", cfg.Notices, NoticesRedis, NoticesPostgres, NoticesOff)
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	pcfg.ConnConfig.RuntimeParams["search_path"] = cfg.Schema
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	ropt, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("redis url: %w", err)
	}
	c := &Conns{Pool: pool, Redis: redis.NewClient(ropt), Schema: cfg.Schema, notices: cfg.Notices}
	if err := c.open(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Conns) open(ctx context.Context) error {
	if err := c.Pool.Ping(ctx); err != nil {
		return fmt.Errorf("PostgreSQL: %w", err)
	}
	if err := c.Redis.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("Redis: %w", err)
	}
	return migrate(ctx, c.Pool, c.Schema)
}

// Transport returns the transport of the reclaim notices that
// Config.Notices chose, over these connections, for watch.New and
// watch.NewPublisher; false when notices are off.
func (c *Conns) Transport() (watch.Transport, bool) {
	switch c.notices {
	case NoticesRedis:
		return watch.Transport{Redis: c.Redis}, true
	case NoticesPostgres:
		return watch.Transport{Postgres: c.Pool}, true
	}
	return watch.Transport{}, false
}

// Go runs run in the background, under a context derived from ctx, until
// Close cancels that context and waits for run to return: a reclaimer
// beside a worker, say. The loops run this way return nil when their
// context ends, so run's error is dropped.
func (c *Conns) Go(ctx context.Context, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = run(ctx) })
	c.stops = append(c.stops, func() { cancel(); wg.Wait() })
}

// RunWatcher runs w until Close, whatever becomes of ctx, and returns once
// w is subscribed to the notices, so that no notice published after it
// returns is missed.
func (c *Conns) RunWatcher(ctx context.Context, w *watch.Watcher) error {
	c.Go(context.WithoutCancel(ctx), w.Run)
	select {
	case <-w.Ready():
		return nil
	case <-time.After(10 * time.Second):
		return errors.New("watcher: not subscribed to reclaim notices after 10s")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops what Go and RunWatcher started, the newest first, and then
// releases the connections.
func (c *Conns) Close() {
	for i := len(c.stops) - 1; i >= 0; i-- {
		c.stops[i]()
	}
	c.stops = nil
	c.Pool.Close()
	_ = c.Redis.Close()
}
