package settle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/interval"
	"github.com/jobguard/jobguard/internal/ledgerlink"
	"github.com/jobguard/jobguard/internal/pgvalue"
	"github.com/jobguard/jobguard/internal/safe"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/retain"
	"github.com/jobguard/jobguard/usage"
)

// Defaults of Config.
const (
	// TableDefault is the records table of the bundled migration.
	TableDefault = "job_settlements"
	// GraceDefault is how long a new record is left to the finalize that
	// wrote it before the sweep may take it.
	GraceDefault = time.Minute
	// UpdateTimeoutDefault bounds each update's context.
	UpdateTimeoutDefault = time.Minute
	// MaxAttemptsDefault is how many sweep attempts a record gets before it
	// is given up.
	MaxAttemptsDefault = 10
	// BackoffMinDefault is the pause after a record's first failed attempt;
	// it doubles with every attempt after that.
	BackoffMinDefault = 30 * time.Second
	// BackoffMaxDefault caps the pause between two attempts.
	BackoffMaxDefault = time.Hour
	// IntervalDefault is Run's pause between sweeps.
	IntervalDefault = time.Minute
	// MaxPerSweepDefault bounds how many records one sweep takes.
	MaxPerSweepDefault = 1000
	// ConcurrencyDefault is how many records one sweep works on at once.
	ConcurrencyDefault = 4
)

// ErrPending is returned, wrapped and joined with the cause, by Finalize
// when the completion committed but its updates or its billing did not all
// succeed: the record is pending, and the settle sweep finishes it. The job
// is done; do not retry it (a redelivery's Start is refused anyway).
var ErrPending = errors.New("settle: completed; the rest is left to the settle sweep")

// ErrGivenUp is returned, wrapped, when a record the caller would bill was
// given up by the sweep. Nothing was billed.
var ErrGivenUp = errors.New("settle: record was given up")

// ErrUnregistered is returned, wrapped, when a spec or a record names an
// update or a meter that has no handler in Config (for a meter: no
// increment, and no counter in Config.Ledger). A spec that names one
// is refused before anything is written; a record that names one (written
// by a process with other handlers) fails its attempt, visibly, and is
// given up in the end like any record that keeps failing.
var ErrUnregistered = errors.New("settle: no handler registered")

// ErrNotGivenUp is Reopen's answer when the execution has no record in the
// given_up state.
var ErrNotGivenUp = errors.New("settle: no given-up record")

// State is a record's state.
type State string

// The states of a record.
const (
	// StatePending: updates or billing are still owed.
	StatePending State = "pending"
	// StateConfirmed: every update succeeded and the usage was billed, in
	// the transaction that set this state.
	StateConfirmed State = "confirmed"
	// StateGivenUp: the sweep stopped trying after MaxAttempts (or found
	// that the job was not completed by the record's execution). Nothing
	// was billed; an operator decides (see Reopen).
	StateGivenUp State = "given_up"
)

// Handler runs one named metadata update of an execution, with the
// arguments its finalize stored. The same handler runs in the finalize's
// process and, after a crash or a failure, in the sweep's, possibly more
// than once, and possibly after another run of it succeeded but before
// that success was recorded: it must be idempotent (an UPDATE that sets
// rather than adds, an upsert, a PUT). Its context ends after
// Config.UpdateTimeout; a handler still running a second later is
// abandoned and its attempt fails. A panic fails the attempt too, as an
// error would.
type Handler func(ctx context.Context, exec jobguard.Execution, args json.RawMessage) error

// Increment adds one usage entry to the caller's billing counters through
// tx, the transaction that inserts the entry's ledger row and confirms the
// record. It runs only when that row is new, so it runs once per (job,
// meter) and need not be idempotent. A panic fails the billing, which rolls
// back, as an error would. It must return when ctx ends: it holds the
// billing transaction, so it cannot be abandoned. The entry is read back
// from the record, on either path: a number in its Attributes is a
// json.Number with the digits it was given, not a float64.
type Increment func(ctx context.Context, tx pgx.Tx, exec jobguard.Execution, entry usage.Entry) error

// Config configures a Settler.
type Config struct {
	// Guard maps the jobs table. Required.
	Guard *jobguard.Guard
	// DB runs the record's writes after the completion (marks, billing)
	// and the sweeps, each in a short transaction of its own: a pool.
	// Required.
	DB *pgxpool.Pool
	// Handlers run the metadata updates, by name. A finalize may name only
	// these, and a sweep runs a record's updates only through them: every
	// process that finalizes or sweeps needs the same names. Defaults to
	// none.
	Handlers map[string]Handler
	// Increments bill usage, by meter. A finalize may bill only these
	// meters and those that Ledger counts (usage.Config.Counters): a
	// counted meter's new ledger row adds its quantity to its account's
	// total in the billing transaction, with the statement Accrue's makes
	// (before the meter's increment, when it has one too). Defaults to
	// none.
	Increments map[string]Increment
	// Ledger records the accruals. Defaults to usage's default ledger
	// (usage_ledger through search_path).
	Ledger *usage.Ledger
	// Schema holds the records table. Defaults to "", which resolves the
	// table through the connection's search_path.
	Schema string
	// Table is the records table's name. Defaults to TableDefault. The
	// records of any number of jobs tables may share one records table:
	// each is keyed by its jobs table (Guard.TableKey) too, and a Settler
	// takes only the records of its Guard's table.
	Table string
	// Grace is how long a new record is left to the finalize that wrote it
	// before a sweep may take it: longer than a finalize's updates and
	// billing take, so that the sweep catches up only after crashes and
	// failures. Taken earlier, nothing is billed twice; the updates may
	// run twice. Defaults to GraceDefault.
	Grace time.Duration
	// UpdateTimeout bounds each update's context, in Finalize and in the
	// sweep; a handler still running a second after it is abandoned, and
	// its attempt fails. A record a sweep has taken is left alone by other
	// sweeps for UpdateTimeout + BackoffMin, so an attempt whose handlers
	// honour their context never overlaps another. Defaults to
	// UpdateTimeoutDefault.
	UpdateTimeout time.Duration
	// MaxAttempts is how many sweep attempts a record gets. The record
	// whose last attempt fails is given up: counted, logged, never billed.
	// Defaults to MaxAttemptsDefault.
	MaxAttempts int
	// BackoffMin is the pause after a record's first failed attempt (and
	// after a failed finalize); each further failure doubles it. Defaults
	// to BackoffMinDefault.
	BackoffMin time.Duration
	// BackoffMax caps the pause. Defaults to BackoffMaxDefault.
	BackoffMax time.Duration
	// Interval is Run's pause between sweeps. Defaults to IntervalDefault.
	Interval time.Duration
	// MaxPerSweep bounds the records one sweep takes. Defaults to
	// MaxPerSweepDefault.
	MaxPerSweep int
	// Concurrency is how many records one sweep works on at once. Defaults
	// to ConcurrencyDefault.
	Concurrency int
	// Logger receives one summary line per sweep (info, or warn when a
	// record was given up, named an unregistered handler, had a handler or
	// increment panic, or the sweep failed), a warning for each record
	// given up, a line per record at debug, and an error line with the
	// stack when the logger's or the meter's own panic was recovered.
	// Defaults to slog.Default().
	Logger *slog.Logger
	// MeterProvider receives jobguard.settle.finalizes,
	// jobguard.settle.records and jobguard.settle.sweep.duration. Defaults
	// to nil: no metrics, at no cost.
	MeterProvider metric.MeterProvider
}

// Settler writes a record with every finalize's completion and settles it:
// at once when the finalize's updates succeed, or later from a sweep. Build
// it with New; it is safe for concurrent use, and any number of processes
// may sweep the same table at once.
type Settler struct {
	cfg Config
	pol policy
	log *slog.Logger
	sql statements
	// ledger is Config.Ledger's side of the billing statement.
	ledger ledgerlink.Ledger
	met    *settleMetrics
	// retention is the table's retention rule (Retention).
	retention retain.Rule
}

// statements are built once by New. Durations travel as microseconds and
// are added to the database's clock, so that every process schedules on
// one clock.
type statements struct {
	// record writes a finalize's record in its completion's statement
	// (guardlink.Alongside): one row for the row the completion changed,
	// none when it changed none. Its parameters, numbered from first:
	// job_id, generation, pending, updates, usage, grace µs.
	record func(first int) string
	mark   string // $1 job_id, $2 generation, $3 update name
	retry  string // $1 job_id, $2 generation, $3 error, $4 delay µs, $5 the claim, $6 its attempt
	// unconfirmed is retry that also takes every update but $7, the
	// failed ones, off the pending list: a finalize's record of its
	// failure.
	unconfirmed string
	giveUp      string // $1 job_id, $2 generation, $3 error, $4 the claim, $5 its attempt
	handBack    string // $1 job_id, $2 generation, $3 the claim, $4 its attempt
	// confirm confirms a pending record and inserts its usage's ledger
	// rows, in one statement: $1 job_id, $2 generation, then the ledger
	// insert's $3 jobs table, $4 job id, $5 generation, $6 time recorded →
	// usage, the meters of the new ledger rows; no row when the record
	// was not pending.
	confirm string
	// counted is confirm for a record whose every meter the ledger
	// counts, the meters given in the order Count takes their rows
	// (counter table, then account): the counters' totals go in with the
	// ledger rows, and the statement is the whole billing. Its parameters are confirm's, then
	// $7 the record's usage as the finalize or the sweep has it (the
	// record is confirmed only if it holds just that), then each meter
	// and its account.
	counted func(meters []string) string
	state   string // $1 job_id, $2 generation → state
	claim   string // $1 lease µs, $2 due by → job_id, generation, pending, updates, usage, attempts, claim
	reopen  string // $1 job_id, $2 generation
}

// claimTrigger is the trigger that moves a record's claim whenever its
// attempts change (MigrationFiles, 0003).
const claimTrigger = "claim_follows_attempts"

// New validates cfg, checks that the records table exists with the columns
// and the trigger of every file of MigrationFiles, and builds every
// statement once.
func New(ctx context.Context, cfg Config) (*Settler, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("settle: new: %w", err)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("settle: new: %w", err)
	}
	tbl, err := ident.QuoteTable(cfg.Schema, cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("settle: new: %w", err)
	}
	// The trigger must fire in a normal session: enabled ('O', origin and
	// local) or always ('A'), not disabled or for replicas only.
	var exists, claim, trigger bool
	if err := cfg.DB.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, EXISTS (SELECT 1 FROM pg_attribute`+
		` WHERE attrelid = to_regclass($1) AND attname = 'claim' AND NOT attisdropped), EXISTS (SELECT 1 FROM pg_trigger`+
		` WHERE tgrelid = to_regclass($1) AND tgname = '`+claimTrigger+`' AND tgenabled IN ('O', 'A'))`,
		tbl).Scan(&exists, &claim, &trigger); err != nil {
		return nil, fmt.Errorf("settle: new: %w", err)
	}
	switch {
	case !exists:
		return nil, fmt.Errorf("settle: new: Table: %s does not exist (apply Migration)", tbl)
	case !claim:
		return nil, fmt.Errorf("settle: new: Table: %s has no column claim (apply every file of MigrationFiles)", tbl)
	case !trigger:
		return nil, fmt.Errorf("settle: new: Table: %s has no enabled trigger %s (apply every file of MigrationFiles)", tbl, claimTrigger)
	}
	ledger := ledgerlink.Of(cfg.Ledger)
	return &Settler{
		cfg:       cfg,
		pol:       policy{maxAttempts: cfg.MaxAttempts, backoffMin: cfg.BackoffMin, backoffMax: cfg.BackoffMax},
		log:       cfg.Logger,
		ledger:    ledger,
		sql:       buildStatements(tbl, cfg.Guard.TableKey(), ledger),
		met:       newSettleMetrics(cfg.MeterProvider),
		retention: retentionRule(tbl, cfg.Guard.TableKey()),
	}, nil
}

// billable reports whether a finalize may bill meter: an increment bills
// it, or the ledger counts it.
func (s *Settler) billable(meter string) bool {
	return s.cfg.Increments[meter] != nil || s.ledger.Counted(meter)
}

// validate checks what New cannot default, naming the field.
func (cfg Config) validate() error {
	switch {
	case cfg.Guard == nil:
		return errors.New("Guard is nil")
	case cfg.DB == nil:
		return errors.New("DB is nil")
	}
	for _, d := range []struct {
		field string
		value time.Duration
	}{
		{"Grace", cfg.Grace}, {"UpdateTimeout", cfg.UpdateTimeout}, {"BackoffMin", cfg.BackoffMin},
		{"BackoffMax", cfg.BackoffMax}, {"Interval", cfg.Interval},
	} {
		if err := interval.Check(d.field, d.value); err != nil {
			return err
		}
	}
	for _, n := range []struct {
		field string
		value int
	}{{"MaxAttempts", cfg.MaxAttempts}, {"MaxPerSweep", cfg.MaxPerSweep}, {"Concurrency", cfg.Concurrency}} {
		if n.value < 0 {
			return fmt.Errorf("%s %d is negative", n.field, n.value)
		}
	}
	// A name is stored in the record, and a meter in the record and the
	// ledger: one that cannot be stored could never be finalized.
	for name, h := range cfg.Handlers {
		if name == "" || h == nil {
			return fmt.Errorf("Handlers[%q]: name is empty or handler is nil", name)
		}
		if err := pgvalue.CheckText(name); err != nil {
			return fmt.Errorf("Handlers[%q]: %w: %w", name, jobguard.ErrUnstorable, err)
		}
	}
	for meter, inc := range cfg.Increments {
		if inc == nil {
			return fmt.Errorf("Increments[%q]: increment is nil", meter)
		}
		// The meter is billed into usage's ledger: usage's rule.
		if err := usage.CheckMeter(meter); err != nil {
			return fmt.Errorf("Increments[%q]: %w", meter, err)
		}
	}
	return nil
}

// withDefaults fills in every field left at its zero value, and checks
// what only the defaults settle (the backoff's bounds).
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Table == "" {
		cfg.Table = TableDefault
	}
	if cfg.Ledger == nil {
		ledger, err := usage.NewLedger(usage.Config{})
		if err != nil {
			return cfg, fmt.Errorf("Ledger: %w", err)
		}
		cfg.Ledger = ledger
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.Grace, GraceDefault)
	def(&cfg.UpdateTimeout, UpdateTimeoutDefault)
	def(&cfg.BackoffMin, BackoffMinDefault)
	def(&cfg.BackoffMax, BackoffMaxDefault)
	def(&cfg.Interval, IntervalDefault)
	if cfg.BackoffMax < cfg.BackoffMin {
		return cfg, fmt.Errorf("BackoffMax %v is below BackoffMin %v", cfg.BackoffMax, cfg.BackoffMin)
	}
	defInt := func(n *int, v int) {
		if *n == 0 {
			*n = v
		}
	}
	defInt(&cfg.MaxAttempts, MaxAttemptsDefault)
	defInt(&cfg.MaxPerSweep, MaxPerSweepDefault)
	defInt(&cfg.Concurrency, ConcurrencyDefault)
	// The logger is the caller's code, called right after the state
	// changes it reports: its panic must not undo them.
	cfg.Logger = safe.Logger(cfg.Logger)
	return cfg, nil
}

// buildStatements builds the statements over the records table tbl for the
// jobs table whose Guard.TableKey is jobs. A record is keyed by its jobs
// table, its job's canonical id and its generation: the jobs table is
// written into every statement, so that the records of any number of jobs
// tables share one records table and each Settler reads, takes and writes
// only its own table's.
//
// ledger is the ledger's side of the billing: its insert, and its
// counters' upserts, which run in the statement that confirms the record.
func buildStatements(tbl, jobs string, ledger ledgerlink.Ledger) statements {
	const (
		now = `statement_timestamp()`
	)
	later := func(n int) string { return now + ` + ` + interval.Param(fmt.Sprintf("$%d", n)) } // $n: micros
	table := ident.Literal(jobs)
	pk := ` WHERE jobs_table = ` + table + ` AND job_id = $1 AND generation = $2`
	// A record's own statements reach its row through the primary key
	// alone. The state they require is compared under the C collation
	// (the same result for these labels), so that it implies the predicate
	// of no partial index: with few pending records, or none analyzed, the
	// planner finds the due index as cheap as the primary key, and a scan
	// of it reads every pending record of the jobs table, and every dead
	// entry the confirmed ones left, to find one.
	pending := ` AND state COLLATE "C" = 'pending'`
	var s statements
	// first is the same for every completion of one jobs table: the
	// statement is built once per value.
	var records sync.Map // first → statement
	s.record = func(first int) string {
		if sql, ok := records.Load(first); ok {
			return sql.(string)
		}
		p := func(i int) string { return fmt.Sprintf("$%d", first+i) }
		sql := `INSERT INTO ` + tbl + ` (jobs_table, job_id, generation, pending, updates, usage, next_attempt_at, created_at, updated_at)` +
			` SELECT ` + table + `, ` + p(0) + `::text, ` + p(1) + `::int8, ` + p(2) + `::text[], ` + p(3) + `::jsonb, ` + p(4) + `::jsonb, ` +
			now + ` + ` + interval.Param(p(5)) + `, ` + now + `, ` + now + ` FROM completed`
		records.Store(first, sql)
		return sql
	}
	// Every write after the record's is conditional on the record being
	// pending: a confirmed or given-up record is never changed by a late
	// finalize or sweep. A sweep's verdict is also conditional on the
	// claim it made: an attempt that outlived its lease, whose record
	// another sweep has claimed since, changes nothing. The fence is the
	// claim, which only grows, not the attempt count, which Reopen starts
	// over and a hand-back lowers, so that a stale attempt never finds its
	// number again. The table's trigger (claimTrigger) moves the claim on
	// every change to attempts that does not set the claim itself: a claim
	// or a hand-back by a process that predates the claim column (it
	// counts attempts alone), a hand-back, a Reopen. The attempt is matched
	// as well, as that older version's own fence is.
	fence := func(n int) string { return fmt.Sprintf(` AND claim = $%d AND attempts = $%d`, n, n+1) }
	s.mark = `UPDATE ` + tbl + ` SET pending = array_remove(pending, $3), updated_at = ` + now +
		pk + pending
	s.retry = `UPDATE ` + tbl + ` SET last_error = $3, next_attempt_at = ` + later(4) +
		`, updated_at = ` + now + pk + pending + fence(5)
	s.unconfirmed = `UPDATE ` + tbl + ` SET pending = ARRAY(SELECT u.name FROM unnest(pending) WITH ORDINALITY AS u(name, n)` +
		` WHERE u.name = ANY($7::text[]) ORDER BY u.n), last_error = $3, next_attempt_at = ` + later(4) +
		`, updated_at = ` + now + pk + pending + fence(5)
	// A record given up is settled too: settled_at dates it for retention
	// (Retention), as confirming does.
	s.giveUp = `UPDATE ` + tbl + ` SET state = 'given_up', last_error = $3, settled_at = ` + now + `, updated_at = ` + now +
		pk + pending + fence(4)
	s.handBack = `UPDATE ` + tbl + ` SET attempts = attempts - 1, next_attempt_at = ` + now +
		`, updated_at = ` + now + pk + pending + fence(3)
	// Confirming takes the record's row lock for the billing transaction:
	// a second biller waits, then finds the record no longer pending. The
	// ledger rows of the record's usage go in with it, read from the row
	// the confirmation returned: none when it matched nothing (confirmed or
	// given up already), so a record is billed only by the transaction
	// that confirms it. An entry whose ledger row exists already is left
	// out of the meters returned, and judged a duplicate.
	confirm := func(also string) string {
		return `WITH confirmed AS (UPDATE ` + tbl + ` SET state = 'confirmed', pending = '{}', last_error = NULL, settled_at = ` + now +
			`, updated_at = ` + now + pk + pending + also + ` RETURNING usage), billed AS (` +
			ledger.Insert(`confirmed, jsonb_to_recordset(confirmed.usage) AS e(account text, meter text, quantity int8, attributes jsonb)`, 3) + `)`
	}
	answer := ` SELECT confirmed.usage::text, ARRAY(SELECT meter FROM billed) FROM confirmed`
	s.confirm = confirm("") + answer
	// The counters' upserts take their rows after every ledger row is in,
	// and one after the other in the order given, each gated on the count
	// of the rows before it: the order Count takes them in, so that two
	// billings that share a counter's row take it, and every row before
	// it, in one order.
	var counted sync.Map // meters joined → statement
	s.counted = func(meters []string) string {
		key := strings.Join(meters, "\x00")
		if sql, ok := counted.Load(key); ok {
			return sql.(string)
		}
		sql, gate := confirm(` AND usage = $7::jsonb`), `(SELECT count(*) FROM billed) > 0`
		for i, m := range meters {
			sql += fmt.Sprintf(`, c%d AS (`, i) +
				ledger.CountFrom(m, fmt.Sprintf(`SELECT $%d, b.quantity FROM billed b WHERE b.meter = $%d AND %s`, 9+2*i, 8+2*i, gate)) + `)`
			gate = fmt.Sprintf(`(SELECT count(*) FROM c%d) >= 0`, i)
		}
		sql += answer
		counted.Store(key, sql)
		return sql
	}
	s.state = `SELECT state FROM ` + tbl + pk
	// A sweep takes the most overdue pending record that no other
	// transaction holds, and pushes it a lease ahead in the same statement,
	// so that other sweeps leave it alone while this one works on it. Only
	// records due by the sweep's start are taken, so a record retried
	// within a sweep waits for the next one. The predicate is the due
	// index's, written as it is, and the jobs table its first column, so a
	// sweep reads its own table's due records only.
	s.claim = `UPDATE ` + tbl + ` SET attempts = attempts + 1, claim = claim + 1, next_attempt_at = ` + later(1) +
		`, updated_at = ` + now + ` WHERE jobs_table = ` + table + ` AND (job_id, generation) = (SELECT job_id, generation FROM ` + tbl +
		` WHERE state = 'pending' AND jobs_table = ` + table + ` AND next_attempt_at <= $2::timestamptz` +
		` ORDER BY next_attempt_at LIMIT 1 FOR UPDATE SKIP LOCKED)` +
		` RETURNING job_id, generation, pending, updates::text, usage::text, attempts, claim`
	// Reopening starts the attempts over; the trigger moves the claim on,
	// so the next claim takes a number no earlier attempt had.
	s.reopen = `UPDATE ` + tbl + ` SET state = 'pending', attempts = 0, last_error = NULL, settled_at = NULL, next_attempt_at = ` + now +
		`, updated_at = ` + now + pk + ` AND state COLLATE "C" = 'given_up'`
	return s
}

// Reopen gives a record that was given up another round of MaxAttempts
// attempts, from the next sweep on: an operator's decision, once what made
// it fail (a handler, a store, a missing registration) is fixed. An attempt
// of the earlier round still running cannot give up the new one: it is
// fenced out by the record's claim number, which only grows. It
// returns ErrNotGivenUp when exec has no given-up record.
func (s *Settler) Reopen(ctx context.Context, exec jobguard.Execution) error {
	id, err := s.cfg.Guard.CanonicalID(exec.JobID)
	if err != nil {
		return fmt.Errorf("settle: reopen: %w", err)
	}
	if !s.cfg.Guard.Fenced() {
		exec.Generation = 0 // as Finalize keyed the record
	}
	tag, err := s.cfg.DB.Exec(ctx, s.sql.reopen, id, exec.Generation)
	if err != nil {
		return fmt.Errorf("settle: reopen: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("settle: reopen: job %s generation %d: %w", id, exec.Generation, ErrNotGivenUp)
	}
	return nil
}

// micros is d in whole microseconds, the unit the statements add to the
// database's clock, rounded up: a wait is never shorter than configured.
func micros(d time.Duration) int64 { return interval.Micros(d) }
