package flow

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/heartbeat"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
	"github.com/jobguard/jobguard/watch"
)

//go:embed schema.sql
var productSchema string

// The job types of the examples.
const (
	TypeChapter = "chapter"
	TypeVideo   = "video"
	TypeExport  = "export"
)

// Defaults of Config.
const (
	DatabaseURLDefault = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	RedisURLDefault    = "redis://127.0.0.1:6379/0"
	SchemaDefault      = "jobguard_examples"
	PrefixDefault      = "jobguard-examples"
	NoticesDefault     = NoticesRedis
)

// The transports of reclaim notices (Config.Notices).
const (
	// NoticesRedis carries notices over Redis pub/sub.
	NoticesRedis = "redis"
	// NoticesPostgres carries notices with Postgres LISTEN/NOTIFY.
	NoticesPostgres = "postgres"
	// NoticesOff sends and watches no notices: a reclaimed execution runs
	// until its call returns, and only its guarded writes are refused.
	NoticesOff = "off"
)

// Config says where the examples keep their state.
type Config struct {
	// DatabaseURL reaches PostgreSQL. Defaults to DatabaseURLDefault.
	DatabaseURL string
	// Schema holds every table; it is created when missing and is the
	// search_path of every connection. Defaults to SchemaDefault.
	Schema string
	// RedisURL reaches Redis. Defaults to RedisURLDefault.
	RedisURL string
	// Prefix namespaces the reclaim markers in Redis. The reclaimer and the
	// processors must agree on it. Defaults to PrefixDefault.
	Prefix string
	// FilesDir receives the encoded videos. Defaults to os.TempDir().
	FilesDir string
	// HeartbeatInterval is the least time between two heartbeat writes of a
	// job. Defaults to heartbeat.IntervalDefault.
	HeartbeatInterval time.Duration
	// Logger receives the processors' warnings and the libraries' logs.
	// Defaults to slog.Default().
	Logger *slog.Logger
	// Notices is how reclaim notices travel from the reclaimer to the
	// workers' watcher: NoticesRedis (on a channel under Prefix),
	// NoticesPostgres (LISTEN/NOTIFY in the database) or NoticesOff. The
	// reclaimer and the processors must agree on it. Defaults to
	// NoticesDefault.
	Notices string
	// NoWatcher runs no Watcher, for a process that runs no executions
	// (the reclaimer service). Defaults to false: Open starts one Watcher
	// for the process unless Notices is NoticesOff.
	NoWatcher bool
	// CheckInterval is the Watcher's time between two checks of the watched
	// rows, which catch a reclaim whose notice was lost. Defaults to
	// watch.CheckIntervalDefault.
	CheckInterval time.Duration
	// MeterProvider receives the metrics of the guard, the start guard, the
	// heartbeat, the compensations, the settler and the reclaimers built by
	// NewReclaimer. Defaults to nil: no metrics.
	MeterProvider metric.MeterProvider
	// SettleGrace is how long a video's finalize record is left to its
	// worker before a settle sweep may take it. Defaults to
	// settle.GraceDefault.
	SettleGrace time.Duration
	// BeforeUpdate runs before each metadata update of a video's finalize
	// in this process, with the update's name: the demo kills a worker
	// there. Defaults to nil.
	BeforeUpdate func(ctx context.Context, update string)
}

// Env is what every processor of the examples shares: the connections, the
// guard over the jobs table, the start guard, the heartbeat and the
// artifacts that a rejected execution must compensate.
type Env struct {
	// Pool reaches the schema (it is every connection's search_path).
	Pool *pgxpool.Pool
	// Redis holds the reclaim markers.
	Redis *redis.Client
	// Guard guards the jobs table of jobguard's bundled migration.
	Guard *jobguard.Guard
	// Starts is the start guard every processor starts its jobs with.
	Starts *jobguard.StartGuard
	// Heartbeat is the process's one heartbeat.
	Heartbeat *heartbeat.Heartbeat
	// Artifacts records what executions create, and compensates files
	// ("file") and asset rows ("asset") of rejected executions.
	Artifacts *compensate.Artifacts
	// Settler finalizes videos with a durable record: their metadata
	// updates ("video", "asset", "content") and their billed seconds
	// survive a worker's crash. Its sweep (Sweep, Run) finishes what a
	// crash or a failure left.
	Settler *settle.Settler
	// FilesDir receives the encoded videos.
	FilesDir string
	// Schema holds every table.
	Schema string
	// Log is the processors' logger.
	Log *slog.Logger
	// Notices publishes reclaim notices; NewReclaimer gives it to the
	// reclaimer. Nil when Config.Notices is NoticesOff.
	Notices *watch.Publisher
	// Watcher is the process's one Watcher, subscribed and running from
	// Open to Close: the processors run each execution's external calls
	// under the context it gives them (see Watch). Nil when notices are off
	// or Config.NoWatcher is set.
	Watcher *watch.Watcher
	// MeterProvider receives the metrics of everything Open builds.
	MeterProvider metric.MeterProvider

	stopWatcher func()
}

// Open connects, creates the schema and every table (the library's
// migrations and the examples' product tables), and builds the guards.
func Open(ctx context.Context, cfg Config) (*Env, error) {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&cfg.DatabaseURL, DatabaseURLDefault)
	def(&cfg.Schema, SchemaDefault)
	def(&cfg.RedisURL, RedisURLDefault)
	def(&cfg.Prefix, PrefixDefault)
	def(&cfg.FilesDir, os.TempDir())
	def(&cfg.Notices, NoticesDefault)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
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
	rdb := redis.NewClient(ropt)
	e := &Env{Pool: pool, Redis: rdb,
		FilesDir: cfg.FilesDir, Schema: cfg.Schema, Log: cfg.Logger, MeterProvider: cfg.MeterProvider}
	if err := e.open(ctx, cfg); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *Env) open(ctx context.Context, cfg Config) error {
	if err := e.Pool.Ping(ctx); err != nil {
		return fmt.Errorf("PostgreSQL: %w", err)
	}
	if err := e.Redis.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("Redis: %w", err)
	}
	if err := migrate(ctx, e.Pool, cfg.Schema); err != nil {
		return err
	}
	var err error
	mp := cfg.MeterProvider
	// What the reclaimer and the processors must agree on lives on the
	// guard: the Redis prefix of the markers and notices, and the leader
	// key of the reclaimers (derived from the schema).
	shared := jobguard.Shared{Prefix: cfg.Prefix, LeaderKey: leaderKey(cfg.Schema)}
	if e.Guard, err = jobguard.NewWithConfig(ctx, e.Pool, jobguard.DefaultTable(), jobguard.GuardConfig{Shared: shared, MeterProvider: mp}); err != nil {
		return err
	}
	e.Starts, err = jobguard.NewStartGuard(e.Guard, e.Redis, jobguard.StartGuardConfig{Logger: e.Log, MeterProvider: mp})
	if err != nil {
		return err
	}
	e.Heartbeat = heartbeat.New(e.Guard, heartbeat.Config{Interval: cfg.HeartbeatInterval, Logger: e.Log, MeterProvider: mp})
	e.Artifacts, err = compensate.New(ctx, compensate.Config{
		Guard: e.Guard, DB: e.Pool, Logger: e.Log, MeterProvider: mp,
		Compensators: map[string]compensate.Func{
			"file":  removeFile,
			"asset": deleteAsset,
		},
	})
	if err != nil {
		return err
	}
	e.Settler, err = settle.New(ctx, settle.Config{
		Guard: e.Guard, DB: e.Pool, Logger: e.Log, MeterProvider: mp, Grace: cfg.SettleGrace,
		Handlers: videoHandlers(e, cfg.BeforeUpdate),
		Increments: map[string]settle.Increment{
			MeterVideoSeconds: func(ctx context.Context, tx pgx.Tx, _ jobguard.Execution, u usage.Entry) error {
				_, err := tx.Exec(ctx, `UPDATE accounts SET video_seconds = video_seconds + $2 WHERE id = $1`, u.Account, u.Quantity)
				return err
			},
		},
	})
	if err != nil {
		return err
	}
	return e.openNotices(ctx, cfg)
}

// openNotices builds the notice publisher and, for a worker process,
// starts its Watcher and waits until it is subscribed, so that no notice
// published after Open returns is missed.
func (e *Env) openNotices(ctx context.Context, cfg Config) error {
	var t watch.Transport
	switch cfg.Notices {
	case NoticesOff:
		return nil
	case NoticesRedis:
		t = watch.Transport{Redis: e.Redis}
	case NoticesPostgres:
		t = watch.Transport{Postgres: e.Pool}
	default:
		return fmt.Errorf("notices %q: want %s, %s or %s", cfg.Notices, NoticesRedis, NoticesPostgres, NoticesOff)
	}
	var err error
	if e.Notices, err = watch.NewPublisher(e.Guard, t); err != nil {
		return err
	}
	if cfg.NoWatcher {
		return nil
	}
	w, err := watch.New(watch.Config{Guard: e.Guard, DB: e.Pool, Transport: t,
		CheckInterval: cfg.CheckInterval, Logger: e.Log})
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { _ = w.Run(runCtx) }) // returns nil when runCtx ends
	e.Watcher, e.stopWatcher = w, func() { cancel(); wg.Wait() }
	select {
	case <-w.Ready():
		return nil
	case <-time.After(10 * time.Second):
		return errors.New("watcher: not subscribed to reclaim notices after 10s")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Watch returns the context to run exec's external calls under: the
// Watcher cancels it, with a *watch.LostError cause, as soon as exec
// loses its job. Call release when the execution ends. Without a Watcher
// it returns ctx itself.
func (e *Env) Watch(ctx context.Context, exec jobguard.Execution) (_ context.Context, release func()) {
	if e.Watcher == nil {
		return ctx, func() {}
	}
	wctx, cancel := e.Watcher.Watch(ctx, exec)
	return wctx, cancel
}

// WithoutWatcher returns a copy of e whose processors run without the
// Watcher: a reclaimed execution's calls run until they return, and only
// the guarded writes refuse what follows, as in a worker that receives no
// notices. The copy shares e's connections; close e, not the copy.
func (e *Env) WithoutWatcher() *Env {
	c := *e
	c.Watcher, c.stopWatcher = nil, nil
	return &c
}

// Reclaimed returns the *watch.LostError that cancelled ctx, or nil
// when ctx was not cancelled because its execution lost the job.
func Reclaimed(ctx context.Context) *watch.LostError {
	var lost *watch.LostError
	if errors.As(context.Cause(ctx), &lost) {
		return lost
	}
	return nil
}

// Close stops the Watcher and releases the connections.
func (e *Env) Close() {
	if e.stopWatcher != nil {
		e.stopWatcher()
	}
	e.Pool.Close()
	_ = e.Redis.Close()
}

// migrate creates the schema and applies every migration in one
// transaction, serialized by an advisory lock so that processes starting
// together do not trip over each other's CREATE TABLE IF NOT EXISTS.
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "jobguard-examples:"+schema); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize()); err != nil {
			return fmt.Errorf("migrate: create schema %s: %w", schema, err)
		}
		for _, m := range []struct{ name, sql string }{
			{"jobguard", jobguard.Migration},
			{"reclaim", reclaim.Migration},
			{"usage", usage.Migration},
			{"compensate", compensate.Migration},
			{"settle", settle.Migration},
			{"examples", productSchema},
		} {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("migrate: %s: %w", m.name, err)
			}
		}
		return nil
	})
}

// removeFile compensates an encoded file. It is idempotent: a file that is
// already gone is done.
func removeFile(_ context.Context, _ pgx.Tx, a compensate.Artifact) error {
	if err := os.Remove(a.Ref); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// deleteAsset compensates an asset row, only while the execution that wrote
// it still owns it: a newer execution's upsert of the same asset is left
// alone.
func deleteAsset(ctx context.Context, tx pgx.Tx, a compensate.Artifact) error {
	_, err := tx.Exec(ctx, `DELETE FROM assets WHERE id = $1 AND job_id = $2 AND generation = $3`,
		a.Ref, a.JobID, a.Generation)
	return err
}
