// Package testenv gives each test its own slice of a real PostgreSQL and a
// real Redis: a fresh schema (dropped at cleanup) reached through connections
// whose search_path is that schema alone, and a Redis key prefix of its own
// (its keys deleted at cleanup). Tests using it can run with t.Parallel().
//
// The servers are found by package endpoint: JOBGUARD_DATABASE_URL and
// JOBGUARD_REDIS_URL, else the local defaults, else containers where a
// Docker engine answers, else the test fails saying what to set. With
// JOBGUARD_REDIS_URL=none there is no Redis at all: Env.Redis is nil, and
// only the suites that need no Redis can run.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/redact"
	"github.com/jobguard/jobguard/internal/testkit/endpoint"
)

// Patience is how long a test waits for something that must happen (a
// log line, a status, a scrape) before it calls it missing. A wait ends as
// soon as the thing happens, so a long patience costs nothing on a quiet
// machine, and a loaded one cannot fail a correct run.
const Patience = 2 * time.Minute

// Env is one test's share of the servers.
type Env struct {
	// Pool reaches the test's schema, in the query mode the test asked for.
	Pool *pgxpool.Pool
	// Schema is the test's own schema; search_path is set to it alone.
	Schema string
	// DatabaseURL reaches the same schema (search_path included), for child
	// processes and extra connections.
	DatabaseURL string
	// Redis is a client of the shared server; keep to Prefix. It is nil
	// when the run has no Redis (endpoint.NoRedis).
	Redis *redis.Client
	// RedisURL reaches the same Redis server.
	RedisURL string
	// Prefix is the test's own Redis key prefix (no trailing colon).
	Prefix string

	t testing.TB
	// explained numbers the statements Explain prepares.
	explained atomic.Int64
}

// Config tunes New.
type Config struct {
	// SimpleProtocol runs the pool in pgx's simple-protocol query mode.
	SimpleProtocol bool
	// MaxConns bounds the pool. Defaults to 8.
	MaxConns int32
	// TimeZone is the session time zone of the pool's connections, such as
	// "Asia/Seoul": timestamps must mean the same in every zone. Defaults to
	// the server's setting.
	TimeZone string
	// AppName is the application_name of the pool's connections, so that
	// a test can find them in pg_stat_activity (and terminate them).
	// Defaults to the driver's.
	AppName string
	// Settings are session settings of the pool's connections, sent when
	// each connects (custom ones, such as "app.actor", included).
	// Defaults to none.
	Settings map[string]string
}

var shared struct {
	once  sync.Once
	err   error
	ep    endpoint.Endpoints
	admin *pgxpool.Pool
	redis *redis.Client
}

func servers() error {
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		ep, err := endpoint.Resolve(ctx, nil)
		if err != nil {
			shared.err = err
			return
		}
		shared.ep = ep
		shared.admin, shared.redis, shared.err = connect(ctx, ep)
	})
	return shared.err
}

// connect opens the admin pool and the Redis client of ep and checks that
// both answer. Its errors name the servers without their passwords.
func connect(ctx context.Context, ep endpoint.Endpoints) (*pgxpool.Pool, *redis.Client, error) {
	red := redact.New(ep.DatabaseURL, ep.RedisURL)
	admin, err := pgxpool.New(context.Background(), ep.DatabaseURL)
	if err == nil {
		if err = admin.Ping(ctx); err != nil {
			admin.Close()
		}
	}
	if err != nil {
		return nil, nil, red.Error(fmt.Errorf("PostgreSQL at %s: %w (set %s)", ep.DatabaseURL, err, endpoint.DatabaseEnv))
	}
	if ep.RedisURL == "" {
		return admin, nil, nil // endpoint.NoRedis
	}
	opt, err := redis.ParseURL(ep.RedisURL)
	if err != nil {
		admin.Close()
		return nil, nil, red.Error(fmt.Errorf("%s: %w", endpoint.RedisEnv, err))
	}
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		admin.Close()
		_ = rdb.Close()
		return nil, nil, red.Error(fmt.Errorf("Redis at %s: %w (set %s)", ep.RedisURL, err, endpoint.RedisEnv))
	}
	return admin, rdb, nil
}

// New creates the test's schema and Redis prefix, and registers their
// removal with t.Cleanup.
func New(t testing.TB, opts ...Config) *Env {
	t.Helper()
	if err := servers(); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	var o Config
	if len(opts) > 0 {
		o = opts[0]
	}
	name := "jgt_" + randomHex(6)
	ctx := context.Background()
	if _, err := shared.admin.Exec(ctx, "CREATE SCHEMA "+ident.Quote(name)); err != nil {
		t.Fatalf("testenv: create schema: %v", err)
	}
	e := &Env{Schema: name, Redis: shared.redis, RedisURL: shared.ep.RedisURL, Prefix: "jgt:" + name, t: t}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := shared.admin.Exec(ctx, "DROP SCHEMA "+ident.Quote(name)+" CASCADE"); err != nil {
			t.Errorf("testenv: drop schema %s: %v", name, err)
		}
		e.deleteKeys(ctx)
	})
	u, err := url.Parse(shared.ep.DatabaseURL)
	if err != nil {
		t.Fatalf("testenv: %s: %v", endpoint.DatabaseEnv, redact.New(shared.ep.DatabaseURL).Error(err))
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	e.DatabaseURL = u.String()
	e.Pool = e.Connect(o)
	return e
}

// NeedRedis skips t when the run has no Redis (endpoint.NoRedis): a test
// of what only Redis does says so, and the run without Redis proves the
// rest works without it.
func NeedRedis(t testing.TB) {
	t.Helper()
	if os.Getenv(endpoint.RedisEnv) == endpoint.NoRedis {
		t.Skipf("%s=%s: this test needs Redis", endpoint.RedisEnv, endpoint.NoRedis)
	}
}

// Connect opens another pool on the test's schema, closed at cleanup.
func (e *Env) Connect(o Config) *pgxpool.Pool {
	e.t.Helper()
	red := redact.New(e.DatabaseURL)
	cfg, err := pgxpool.ParseConfig(e.DatabaseURL)
	if err != nil {
		e.t.Fatalf("testenv: %v", red.Error(err))
	}
	cfg.MaxConns = o.MaxConns
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 8
	}
	if o.SimpleProtocol {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	}
	if o.TimeZone != "" {
		cfg.ConnConfig.RuntimeParams["timezone"] = o.TimeZone
	}
	if o.AppName != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = o.AppName
	}
	for k, v := range o.Settings {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		e.t.Fatalf("testenv: connect: %v", red.Error(err))
	}
	e.t.Cleanup(pool.Close)
	return pool
}

// Exec runs SQL on the test's schema and fails the test on error.
func (e *Env) Exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.Pool.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("testenv: %v\n%s", err, sql)
	}
}

// Role creates a login role that is not a superuser, named after name and
// the test's schema, which may use the schema and do anything to the
// tables in it now (GRANT ALL), and is dropped at cleanup; it returns a
// pool config on the schema as that role. A test narrows its privileges
// with Exec (REVOKE, GRANT on columns) before it connects.
func (e *Env) Role(name string) (role string, cfg *pgxpool.Config) {
	e.t.Helper()
	role = strings.ToLower("jgt_" + name + "_" + e.Schema)
	e.Exec(fmt.Sprintf(`CREATE ROLE %s LOGIN`, ident.Quote(role)))
	e.t.Cleanup(func() {
		_, _ = e.Pool.Exec(context.Background(), fmt.Sprintf(`DROP OWNED BY %s`, ident.Quote(role)))
		_, _ = e.Pool.Exec(context.Background(), fmt.Sprintf(`DROP ROLE %s`, ident.Quote(role)))
	})
	e.Exec(fmt.Sprintf(`GRANT USAGE ON SCHEMA %s TO %s`, ident.Quote(e.Schema), ident.Quote(role)))
	e.Exec(fmt.Sprintf(`GRANT ALL ON ALL TABLES IN SCHEMA %s TO %s`, ident.Quote(e.Schema), ident.Quote(role)))
	cfg, err := pgxpool.ParseConfig(e.DatabaseURL)
	if err != nil {
		e.t.Fatalf("testenv: %v", redact.New(e.DatabaseURL).Error(err))
	}
	cfg.ConnConfig.User = role
	return role, cfg
}

// Explain runs sql once, as a prepared statement executed with args (SQL
// literals, as EXECUTE takes them) under plan_cache_mode mode
// ("force_custom_plan" or "force_generic_plan"), in a transaction it rolls
// back, and returns the plan it ran: EXPLAIN ANALYZE without costs or
// timings, so that a test can tell which index served a statement and how
// many rows it read to find its own.
func (e *Env) Explain(sql, args, mode string) string {
	e.t.Helper()
	ctx := context.Background()
	tx, err := e.Pool.Begin(ctx)
	if err != nil {
		e.t.Fatalf("testenv: explain: %v", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// A prepared statement outlives the transaction: each gets a name of
	// its own.
	name := fmt.Sprintf("explained_%d", e.explained.Add(1))
	var lines []string
	_, err = tx.Exec(ctx, `SET LOCAL plan_cache_mode = `+mode)
	if err == nil {
		_, err = tx.Exec(ctx, `PREPARE `+name+` AS `+sql)
	}
	if err == nil {
		var rows pgx.Rows
		rows, err = tx.Query(ctx, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE `+name+`(`+args+`)`)
		if err == nil {
			lines, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
	}
	if err != nil {
		e.t.Fatalf("testenv: explain: %v\n%s", err, sql)
	}
	return strings.Join(lines, "\n")
}

// Plans explains each of stmts (a name → its SQL and its EXECUTE
// arguments, as Explain takes them) under custom and generic plans, first
// before table is analyzed, then after, and hands each plan to check with
// a label that says which: the cases a plan test needs, since the planner
// may choose otherwise with and without statistics and with and without
// the arguments' values.
func (e *Env) Plans(table string, stmts map[string][2]string, check func(label, plan string)) {
	e.t.Helper()
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			e.Exec(`ANALYZE ` + table)
		}
		for name, st := range stmts {
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				check(fmt.Sprintf("%s, %s, analyzed %v", name, mode, analyzed), e.Explain(st[0], st[1], mode))
			}
		}
	}
}

// Audit records every row written to tables (SQL names, quoted as
// needed) from now on, by any statement of any session, and returns a
// func that counts the rows written so far: the proof that something
// wrote nothing.
func (e *Env) Audit(tables ...string) func() int {
	e.t.Helper()
	e.Exec(`CREATE TABLE audit (tbl text NOT NULL, op text NOT NULL)`)
	e.Exec(`CREATE FUNCTION audit_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO audit VALUES (TG_TABLE_NAME, TG_OP);
	RETURN NULL;
END $$`)
	for _, tbl := range tables {
		e.Exec(`CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON ` + tbl +
			` FOR EACH ROW EXECUTE FUNCTION audit_row()`)
	}
	return func() int {
		e.t.Helper()
		var n int
		if err := e.Pool.QueryRow(context.Background(), `SELECT count(*) FROM audit`).Scan(&n); err != nil {
			e.t.Fatalf("testenv: count the audited writes: %v", err)
		}
		return n
	}
}

// Key returns a Redis key under the test's prefix.
func (e *Env) Key(parts ...string) string {
	k := e.Prefix
	for _, p := range parts {
		k += ":" + p
	}
	return k
}

func (e *Env) deleteKeys(ctx context.Context) {
	if e.Redis == nil {
		return
	}
	iter := e.Redis.Scan(ctx, 0, e.Prefix+"*", 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if len(keys) > 0 {
		_ = e.Redis.Del(ctx, keys...).Err()
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ExampleTB stands in for the testing.TB that Example functions lack, so
// they can use New and the fixtures too: it panics where a test would fail,
// and done runs the registered cleanups (defer it).
func ExampleTB() (tb testing.TB, done func()) {
	e := &exampleTB{}
	return e, e.done
}

// exampleTB embeds the interface to satisfy its unexported method; every
// method the harness calls is overridden.
type exampleTB struct {
	testing.TB
	cleanups []func()
}

func (e *exampleTB) Helper()                        {}
func (e *exampleTB) Cleanup(f func())               { e.cleanups = append(e.cleanups, f) }
func (e *exampleTB) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (e *exampleTB) Errorf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }

func (e *exampleTB) done() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}
