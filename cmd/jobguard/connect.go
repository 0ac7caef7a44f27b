package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
)

// connectTimeout bounds connecting to a server that does not answer, when
// the URL does not say (connect_timeout).
const connectTimeout = 10 * time.Second

// conns are a command's connections.
type conns struct {
	pool *pgxpool.Pool
	// where names the database for messages, without its password.
	where string
	// redis is nil until openRedis. redisWhere names its server for
	// messages, and redisTodo says what to check when it fails.
	redis                 *redis.Client
	redisWhere, redisTodo string
	// log receives the guard's warnings of the mapping (a column under a
	// default name it leaves out): the command's logger, on stderr, in
	// every command.
	log *slog.Logger
}

// openDB connects to PostgreSQL and checks that it answers. The guards
// built on it warn through the command's logger.
func (c *cli) openDB(ctx context.Context, s *settings) (*conns, error) {
	log, err := c.logger(s)
	if err != nil {
		return nil, err
	}
	cn, err := dial(ctx, s)
	if err != nil {
		return nil, err
	}
	cn.log = log
	return cn, nil
}

// dial connects to PostgreSQL and checks that it answers.
func dial(ctx context.Context, s *settings) (*conns, error) {
	cfg, err := pgxpool.ParseConfig(s.DatabaseURL)
	if err != nil {
		return nil, usageErr("%s: %v", s.databaseURLName(), err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	cc := cfg.ConnConfig
	where := fmt.Sprintf("%s:%d (database %q, user %q)", cc.Host, cc.Port, cc.Database, cc.User)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fail(exitError, fmt.Errorf("PostgreSQL at %s: %w", where, err), "check %s", s.databaseURLName())
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fail(exitError, fmt.Errorf("cannot reach PostgreSQL at %s: %w", where, err),
			"check that the server is up and that %s names it", s.databaseURLName())
	}
	return &conns{pool: pool, where: where}, nil
}

// openRedis creates the Redis client when the settings keep something in
// Redis (settings.needsRedis), and else leaves it nil: a deployment
// without Redis needs no Redis URL. With ping, it checks that Redis
// answers. Without, the client connects at its first command, so a
// command that may not need Redis does not fail for it.
func (c *conns) openRedis(ctx context.Context, s *settings, ping bool) error {
	if !s.needsRedis() {
		return nil
	}
	opt, err := redis.ParseURL(s.RedisURL)
	if err != nil {
		return usageErr("%s: %v", s.redisURLName(), err)
	}
	opt.DialTimeout = min(opt.DialTimeout, 5*time.Second)
	opt.MaxRetries = 1
	c.redis = redis.NewClient(opt)
	c.redisWhere = opt.Addr
	c.redisTodo = fmt.Sprintf("check that Redis is up and that %s names it (--markers, --notices or --source keep something there)", s.redisURLName())
	if !ping {
		return nil
	}
	if err := c.redis.Ping(ctx).Err(); err != nil {
		return fail(exitError, fmt.Errorf("cannot reach Redis at %s: %w", opt.Addr, err), "%s", c.redisTodo)
	}
	return nil
}

func (c *conns) close() {
	if c.redis != nil {
		_ = c.redis.Close()
	}
	c.pool.Close()
}

// guard builds the guard over the mapped table, with the shared settings,
// recording its metrics on mp (nil: none). A mapping that does not match
// the table is the library's error, with what to change.
func (c *conns) guard(ctx context.Context, s *settings, mp metric.MeterProvider) (*jobguard.Guard, error) {
	g, err := jobguard.NewWithConfig(ctx, c.pool, s.Table, jobguard.GuardConfig{Shared: s.Shared, MeterProvider: mp, Logger: c.log})
	if err != nil {
		return nil, fail(exitError, err, "the table mapping does not match the table in %s: set --schema, --table "+
			"and the column flags (or the config file's \"table\"); 'jobguard help config' shows them", c.where)
	}
	return g, nil
}

// limits is the limits table.
func (c *conns) limits(s *settings) (*reclaim.TableLimits, error) {
	l, err := reclaim.NewTableLimits(reclaim.TableLimitsConfig{DB: c.pool, Schema: s.limitsSchema(), Table: s.LimitsTable})
	if err != nil {
		return nil, usageErr("limits table: %v", err)
	}
	return l, nil
}

// readLimits reads every limit, saying how to create the table when it is
// missing.
func readLimits(ctx context.Context, l reclaim.Limits, s *settings) (map[string]time.Duration, error) {
	m, err := l.Limits(ctx)
	if err != nil {
		return nil, limitsErr(err, s)
	}
	return m, nil
}

// limitsErr explains a failed read or write of the limits table.
func limitsErr(err error, s *settings) error {
	if isUndefinedTable(err) {
		return fail(exitError, err, "the limits table %s does not exist: create it with reclaim's migration "+
			"(reclaim/migrations/0001_job_type_limits.sql) or point --limits-schema and --limits-table at yours",
			limitsName(s))
	}
	return err
}

// limitsName is the limits table as the messages name it.
func limitsName(s *settings) string {
	if schema := s.limitsSchema(); schema != "" {
		return schema + "." + s.LimitsTable
	}
	return s.LimitsTable
}

// isUndefinedTable reports whether err is PostgreSQL's undefined_table.
func isUndefinedTable(err error) bool {
	var pg interface{ SQLState() string }
	return errors.As(err, &pg) && pg.SQLState() == "42P01"
}

// notFound is the error of a job id without a row in the mapped table.
func notFound(guard *jobguard.Guard, id string) error {
	return fail(exitNotFound, fmt.Errorf("job %s not found in %s", id, guard.Table().QualifiedName()),
		"check the id, and that --schema and --table (or the config file) name the table the workers write")
}

// openJob is the start of a command that takes one job id: it connects,
// builds the guard, and returns the id as the id column prints it. A
// malformed id is a usage error. On success the caller closes cn.
func (c *cli) openJob(ctx context.Context, s *settings, command string, args []string) (cn *conns, guard *jobguard.Guard, id string, err error) {
	if len(args) != 1 {
		return nil, nil, "", usageErr("%s takes one job id; got %d arguments", command, len(args))
	}
	if cn, err = c.openDB(ctx, s); err != nil {
		return nil, nil, "", err
	}
	if guard, err = cn.guard(ctx, s, nil); err != nil {
		cn.close()
		return nil, nil, "", err
	}
	if id, err = guard.CanonicalID(args[0]); err != nil {
		cn.close()
		return nil, nil, "", fail(exitUsage, err, "")
	}
	return cn, guard, id, nil
}
