package flow

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/heartbeat"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/usage"
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
	// Markers is where the start guard and the reclaimer keep markers.
	Markers jobguard.MarkerConfig
	// FilesDir receives the encoded videos.
	FilesDir string
	// Schema holds every table.
	Schema string
	// Log is the processors' logger.
	Log *slog.Logger
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
	e := &Env{Pool: pool, Redis: rdb, Markers: jobguard.MarkerConfig{Prefix: cfg.Prefix},
		FilesDir: cfg.FilesDir, Schema: cfg.Schema, Log: cfg.Logger}
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
	if e.Guard, err = jobguard.New(ctx, e.Pool, jobguard.DefaultTable()); err != nil {
		return err
	}
	e.Starts, err = jobguard.NewStartGuard(e.Guard, e.Redis, jobguard.StartGuardOptions{
		Markers: e.Markers, Logger: e.Log,
	})
	if err != nil {
		return err
	}
	e.Heartbeat = heartbeat.New(e.Guard, heartbeat.Config{Interval: cfg.HeartbeatInterval, Logger: e.Log})
	e.Artifacts, err = compensate.New(ctx, compensate.Config{
		Guard: e.Guard, DB: e.Pool, Logger: e.Log,
		Compensators: map[string]compensate.Func{
			"file":  removeFile,
			"asset": deleteAsset,
		},
	})
	return err
}

// Close releases the connections.
func (e *Env) Close() {
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
