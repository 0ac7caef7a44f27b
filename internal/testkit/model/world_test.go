package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/internal/testkit/testenv"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/lease"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
	"github.com/jobguard/jobguard/watch"
)

// sideSchema is what every table shape gets beside its jobs table: the
// parents (a course, a video), the product rows a completion writes, the
// metadata the settle handlers write, the bills the increments add, and
// the totals the ledger's counters add (numeric: quantities reach
// MaxInt64).
const sideSchema = `
CREATE TABLE parents (id text PRIMARY KEY, status text NOT NULL DEFAULT 'GENERATING');
CREATE TABLE products (job_id text NOT NULL, generation bigint NOT NULL);
CREATE TABLE meta (job_id text NOT NULL, name text NOT NULL, PRIMARY KEY (job_id, name));
CREATE TABLE bills (job_id text NOT NULL, meter text NOT NULL, quantity bigint NOT NULL);
CREATE TABLE things (ref text PRIMARY KEY);
CREATE TABLE totals (account text PRIMARY KEY, tokens numeric NOT NULL DEFAULT 0, seconds numeric NOT NULL DEFAULT 0);
`

// world is one table shape in its own schema, kept for a whole run: each
// sequence empties it and starts over with fresh ids.
type world struct {
	t        *testing.T
	env      *testenv.Env
	jobs     *fixture.Jobs
	guard    *jobguard.Guard
	table    jobguard.Table
	starts   *jobguard.StartGuard // Redis reachable
	startsNo *jobguard.StartGuard // Redis unreachable
	markers  *marker.RedisStore
	settler  *settle.Settler
	// parker is the settler whose attempts park (park_test.go), and
	// parking the attempt armed to park.
	parker  *settle.Settler
	parking *parking
	// increments bill seconds into bills; tokens has none, so that a
	// record billing tokens alone (or nothing) is billed by settle's one
	// statement, and one billing seconds by its transaction.
	increments map[string]settle.Increment
	// ledger counts both meters into totals, beside the increment's
	// bills: Accrue and the settlers of the jobs table bill through it.
	ledger *usage.Ledger
	// arts are the artifacts of the two workers and of the compensate
	// sweeper (compensate_test.go); none for a table without generations.
	arts [3]*compensate.Artifacts
	// watcher watches the executions; notices publishes the reclaims'
	// (watch_test.go). None for a table without generations.
	watcher *watch.Watcher
	notices *watch.Publisher
	limits  *reclaim.TableLimits
	down    *redis.Client
	log     *slog.Logger
	reason  string

	// The settle handlers' memory of the current sequence: calls per
	// (job, update) and whether the broken store was repaired.
	mu       sync.Mutex
	calls    map[string]int
	repaired map[string]bool
	// twin is a second jobs table of the same shape in the same schema,
	// sharing the side tables: its job 42 is not the first table's.
	twin        *jobguard.Guard
	twinStarts  *jobguard.StartGuard
	twinSettler *settle.Settler

	poisoned map[string]bool // the jobs whose parent rule fails

	reclaim map[reclaimerKey]*reclaim.Reclaimer
	source  *queueSource

	// failing is set once a sequence failed: from then on rapid replays
	// and shrinks it, past the run's deadline.
	failing atomic.Bool
	// began and sequences say when and after how many sequences the first
	// failure came.
	began     time.Time
	sequences int
	// cur is the machine of the running sequence, which the queue source
	// and the handlers read.
	cur *machine
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// quietRedis keeps go-redis from printing every failed dial of the
// unreachable client.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quietRedis{}) }

func newWorld(t *testing.T, v fixture.Variant, simple bool, zone string) *world {
	t.Helper()
	env := testenv.New(t, testenv.Config{SimpleProtocol: simple, TimeZone: zone, MaxConns: 12})
	jobs := fixture.Create(t, env, v)
	ownedBy(t, jobs)
	env.Exec(lease.Migration)
	env.Exec(usage.Migration)
	env.Exec(settle.Migration)
	env.Exec(reclaim.Migration)
	env.Exec(compensate.Migration)
	env.Exec(sideSchema)
	w := &world{t: t, env: env, jobs: jobs, guard: jobs.Guard, table: jobs.Table, log: quiet,
		reason: jobs.Guard.Shared().ReclaimedReason}
	var err error
	ctx := context.Background()
	if w.starts, err = jobguard.NewStartGuard(w.guard, env.Redis, jobguard.StartGuardConfig{Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	// A client of a port nothing listens on: Redis unreachable.
	w.down = redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 200 * time.Millisecond, MaxRetries: -1,
		DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	t.Cleanup(func() { _ = w.down.Close() })
	if w.startsNo, err = jobguard.NewStartGuard(w.guard, w.down, jobguard.StartGuardConfig{Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	if w.markers, err = marker.NewRedisStore(w.guard, env.Redis, marker.Config{}); err != nil {
		t.Fatal(err)
	}
	if w.limits, err = reclaim.NewTableLimits(reclaim.TableLimitsConfig{DB: env.Pool}); err != nil {
		t.Fatal(err)
	}
	handler := func(name string) settle.Handler {
		return func(ctx context.Context, exec jobguard.Execution, _ json.RawMessage) error {
			if err := w.call(exec.JobID, name); err != nil {
				return err
			}
			_, err := env.Pool.Exec(ctx, `INSERT INTO meta (job_id, name) VALUES ($1, $2) ON CONFLICT DO NOTHING`, exec.JobID, name)
			return err
		}
	}
	// The bills of the twin table's jobs are told apart by a prefix.
	incrementOf := func(prefix string) settle.Increment {
		return func(ctx context.Context, tx pgx.Tx, exec jobguard.Execution, e usage.Entry) error {
			_, err := tx.Exec(ctx, `INSERT INTO bills (job_id, meter, quantity) VALUES ($1, $2, $3)`, prefix+exec.JobID, e.Meter, e.Quantity)
			return err
		}
	}
	increment := incrementOf("")
	w.increments = map[string]settle.Increment{"seconds": increment}
	if w.ledger, err = usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
		"tokens":  {Table: "totals", Key: "account", Column: "tokens"},
		"seconds": {Table: "totals", Key: "account", Column: "seconds"},
	}}); err != nil {
		t.Fatal(err)
	}
	w.settler, err = settle.New(ctx, settle.Config{
		Guard: w.guard, DB: env.Pool, Logger: quiet, Ledger: w.ledger,
		Handlers: map[string]settle.Handler{
			"ok": handler("ok"), "flaky": handler("flaky"), "broken": handler("broken"), "panicky": handler("panicky"),
		},
		Increments:    w.increments,
		Grace:         time.Microsecond,
		UpdateTimeout: 10 * time.Second,
		MaxAttempts:   maxTries,
		BackoffMin:    time.Microsecond,
		BackoffMax:    time.Microsecond,
		Concurrency:   2,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.watcherOf(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.artifactsOf(ctx); err != nil {
		t.Fatal(err)
	}
	if w.parker, err = w.parkSettler(ctx); err != nil {
		t.Fatal(err)
	}
	env.Exec(`CREATE TABLE twin (LIKE ` + w.table.QualifiedName() + ` INCLUDING ALL)`)
	tt := w.table
	tt.Schema, tt.Name = env.Schema, "twin"
	if w.twin, err = jobguard.NewWithConfig(ctx, env.Pool, tt, jobguard.GuardConfig{Shared: w.guard.Shared()}); err != nil {
		t.Fatal(err)
	}
	if w.twinStarts, err = jobguard.NewStartGuard(w.twin, env.Redis, jobguard.StartGuardConfig{Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	if w.twinSettler, err = settle.New(ctx, settle.Config{Guard: w.twin, DB: env.Pool, Logger: quiet,
		Increments: map[string]settle.Increment{"tokens": incrementOf("twin:"), "seconds": incrementOf("twin:")}}); err != nil {
		t.Fatal(err)
	}
	if w.reclaim, w.source, err = w.reclaimers(); err != nil {
		t.Fatal(err)
	}
	if v.Name == fixture.Int4Nullable.Name {
		w.refuseNullable(t)
	}
	return w
}

// ownedBy gives a fenced table that has none an owner column, and its
// guard the mapping of it, so that every table shape with a generation
// can be started under a worker's lease and rescued.
func ownedBy(t *testing.T, jobs *fixture.Jobs) {
	t.Helper()
	if jobs.Table.GenerationColumn == "" || jobs.Table.OwnerColumn != "" {
		return
	}
	col := "owner"
	if jobs.Name == fixture.Prisma.Name {
		col = "leaseId"
	}
	jobs.Env.Exec(`ALTER TABLE ` + jobs.Table.QualifiedName() + ` ADD COLUMN ` + ident.Quote(col) + ` text`)
	jobs.Table.OwnerColumn = col
	jobs.Guard = jobs.GuardWith(t, jobguard.Shared{})
	jobs.Table = jobs.Guard.Table()
}

// refuseNullable checks that a mapping whose generation or type column
// admits NULL, with a row holding NULL in it, is refused, naming the SQL
// that fixes it: such a column accepted fails later, on every call.
func (w *world) refuseNullable(t *testing.T) {
	t.Helper()
	for _, col := range []string{w.table.GenerationColumn, w.table.TypeColumn} {
		w.env.Exec(`CREATE TABLE loose (LIKE ` + w.table.QualifiedName() + ` INCLUDING DEFAULTS);
			ALTER TABLE loose ALTER COLUMN ` + ident.Quote(col) + ` DROP NOT NULL, ALTER COLUMN ` + ident.Quote(col) + ` DROP DEFAULT;
			INSERT INTO loose (id, status, updated_at) VALUES (1, 'PROCESSING', now())`)
		tb := w.table
		tb.Name = "loose"
		_, err := jobguard.New(context.Background(), w.env.Pool, tb)
		if err == nil || !strings.Contains(err.Error(), "SET NOT NULL") {
			t.Fatalf("New over a table whose %s admits NULL = %v, want a refusal naming the fix", col, err)
		}
		w.env.Exec(`DROP TABLE loose`)
	}
}

// call is the behaviour of a settle handler, as the model describes it
// (job.runUpdate): a flaky store fails once, a panicky handler panics once,
// a broken store fails until repaired.
func (w *world) call(jobID, name string) error {
	w.mu.Lock()
	k := jobID + "/" + name
	w.calls[k]++
	n, repaired := w.calls[k], w.repaired[jobID]
	w.mu.Unlock()
	switch {
	case name == "flaky" && n == 1:
		return errors.New("store refused the write once")
	case name == "panicky" && n == 1:
		panic("handler panicked")
	case name == "broken" && !repaired:
		return errors.New("store is broken")
	}
	return nil
}

// reset empties the world for a new sequence.
func (w *world) reset(ctx context.Context) error {
	w.mu.Lock()
	w.calls, w.repaired, w.poisoned = map[string]int{}, map[string]bool{}, map[string]bool{}
	w.mu.Unlock()
	_, err := w.env.Pool.Exec(ctx, `TRUNCATE `+w.table.QualifiedName()+
		`, twin, parents, products, meta, bills, things, totals, job_artifacts, usage_ledger, job_settlements, job_type_limits, jobguard_workers`)
	if err != nil {
		return err
	}
	return w.flush(ctx)
}

// flush deletes every key of the test's prefix: a FLUSHDB of its own keys.
func (w *world) flush(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var keys []string
	iter := w.env.Redis.Scan(ctx, 0, w.env.Prefix+":*", 500).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(keys) > 0 {
		return w.env.Redis.Del(ctx, keys...).Err()
	}
	return nil
}

// insert adds a job with its parent row.
func (w *world) insert(ctx context.Context, id, parent, typ string, st status, start bool) error {
	tb := w.table
	cols := []string{tb.IDColumn, tb.StatusColumn, tb.UpdatedAtColumn}
	now := w.nowExpr(tb.UpdatedAtColumn)
	vals := []string{"$1", "$2", now}
	args := []any{id, w.statusWord(st)}
	if tb.TypeColumn != "" {
		cols, vals, args = append(cols, tb.TypeColumn), append(vals, fmt.Sprintf("$%d", len(args)+1)), append(args, typ)
	}
	if tb.ParentIDColumn != "" && parent != "" {
		cols, vals, args = append(cols, tb.ParentIDColumn), append(vals, fmt.Sprintf("$%d", len(args)+1)), append(args, parent)
	}
	if tb.StartedAtColumn != "" && start {
		cols, vals = append(cols, tb.StartedAtColumn), append(vals, w.nowExpr(tb.StartedAtColumn))
	}
	for i, c := range cols {
		cols[i] = ident.Quote(c)
	}
	idCast := ""
	if w.jobs.IDType == fixture.IDInt {
		idCast = "::bigint"
	} else if w.jobs.IDType == fixture.IDUUID {
		idCast = "::uuid"
	}
	vals[0] = "$1" + idCast
	sql := fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", tb.QualifiedName(), strings.Join(cols, ", "), strings.Join(vals, ", "))
	if _, err := w.env.Pool.Exec(ctx, sql, args...); err != nil {
		return err
	}
	if parent == "" {
		return nil
	}
	_, err := w.env.Pool.Exec(ctx, `INSERT INTO parents (id) VALUES ($1)`, parent)
	return err
}

// nowExpr is now() in the convention of a timestamp column: UTC wall time
// for one without time zone.
func (w *world) nowExpr(col string) string {
	if w.jobs.Name == fixture.Prisma.Name {
		return "(now() AT TIME ZONE 'UTC')"
	}
	return "now()"
}

func (w *world) statusWord(s status) string {
	st := w.table.Statuses
	return [...]string{st.Queued, st.Processing, st.Completed, st.Failed}[s]
}

// age moves the job's updated_at (and its start, when it has one) back by d:
// time passing, on the database's side.
func (w *world) age(ctx context.Context, id string, d time.Duration) error {
	tb := w.table
	set := fmt.Sprintf("%s = %s - $2::interval", ident.Quote(tb.UpdatedAtColumn), ident.Quote(tb.UpdatedAtColumn))
	if tb.StartedAtColumn != "" {
		sa := ident.Quote(tb.StartedAtColumn)
		set += fmt.Sprintf(", %s = %s - $2::interval", sa, sa)
	}
	_, err := w.env.Pool.Exec(ctx, fmt.Sprintf("UPDATE %s SET %s WHERE %s::text = $1", tb.QualifiedName(), set,
		ident.Quote(tb.IDColumn)), id, fmt.Sprintf("%d microseconds", d.Microseconds()))
	return err
}

// row is a job's row as stored.
type row struct {
	status    string
	gen       int64
	reason    string
	hasReason bool
	owner     string // the lease id in the owner column; "" for NULL or none
}

func (w *world) readRows(ctx context.Context) (map[string]row, error) {
	tb := w.table
	gen := "0::int8"
	if tb.GenerationColumn != "" {
		gen = ident.Quote(tb.GenerationColumn) + "::int8"
	}
	owner := "NULL::text"
	if tb.OwnerColumn != "" {
		owner = ident.Quote(tb.OwnerColumn) + "::text"
	}
	rows, err := w.env.Pool.Query(ctx, fmt.Sprintf("SELECT %s::text, %s::text, %s, %s::text, %s FROM %s",
		ident.Quote(tb.IDColumn), ident.Quote(tb.StatusColumn), gen, ident.Quote(tb.FailureReasonColumn), owner, tb.QualifiedName()))
	if err != nil {
		return nil, err
	}
	out := map[string]row{}
	for rows.Next() {
		var id string
		var r row
		var reason, owner *string
		if err := rows.Scan(&id, &r.status, &r.gen, &reason, &owner); err != nil {
			return nil, err
		}
		if owner != nil {
			r.owner = *owner
		}
		if reason != nil {
			r.reason, r.hasReason = *reason, true
		}
		out[id] = r
	}
	return out, rows.Err()
}

// pairs reads a two-column query into a map of its rows' first column to
// their second, counting duplicates of the first in dup.
func (w *world) pairs(ctx context.Context, sql string, args ...any) (map[string]string, []string, error) {
	rows, err := w.env.Pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	var dup []string
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, nil, err
		}
		if _, ok := out[k]; ok {
			dup = append(dup, k)
		}
		out[k] = v
	}
	return out, dup, rows.Err()
}
