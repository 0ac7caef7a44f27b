package compensate

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/interval"
	"github.com/jobguard/jobguard/internal/safe"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
)

// Defaults of Config.
const (
	// TableDefault is the artifacts table of the bundled migration.
	TableDefault = "job_artifacts"
	// IntervalDefault is Run's pause between sweeps.
	IntervalDefault = time.Minute
	// MaxPerSweepDefault bounds how many artifacts one sweep compensates.
	MaxPerSweepDefault = 1000
	// RecheckAfterDefault is how long after its compensation an artifact is
	// compensated once more.
	RecheckAfterDefault = 15 * time.Minute
)

// ErrCompensated is Record's refusal of an artifact that was compensated
// already, or is owed compensation: its execution lost its job (or was
// given up), so whatever it creates now belongs to no job. Record marks the
// artifact owed again, so that if it is created anyway the next sweep
// removes it; stop the execution instead. It wraps jobguard.ErrJobTerminal,
// so jobguard.IsPermanent reports true, unless the job went back to the
// queue for another attempt (a rescue, an operator's Retry): Record's
// refusal then wraps jobguard.ErrRequeued as well, as the execution's save
// would, and the queue must deliver the job again.
var ErrCompensated = fmt.Errorf("compensate: artifact already compensated: %w", jobguard.ErrJobTerminal)

// Artifact is one thing an execution created before its completion: a file,
// a storage object, a row.
type Artifact struct {
	ID int64
	// JobID and Generation name the execution that created it.
	JobID      string
	Generation int64
	// Kind selects the compensator ("file", "s3", "asset_row").
	Kind string
	// Ref says which one: a path, a storage key, a row id. Never empty.
	Ref string
	// Attempts counts earlier compensation attempts.
	Attempts int
}

// Func undoes one artifact. tx is the transaction that marks the artifact
// done: undo a row through it, and the undo and the mark commit together.
// It must be idempotent, in the database and outside it (deleting a file,
// an object): every artifact is compensated a second time, RecheckAfter
// after the first, and again whenever its execution is found to have
// stopped after a sweep compensated it; a missing thing is done. A non-nil
// error rolls back what fn wrote through tx and leaves the artifact owed,
// to be retried by the next sweep; so does a panic, whose error wraps a
// *jobguard.PanicError and whose stack is logged. It must return when ctx
// ends: it holds the artifact's transaction, so it cannot be abandoned.
type Func func(ctx context.Context, tx pgx.Tx, a Artifact) error

// Config configures Artifacts.
type Config struct {
	// Guard maps the jobs table. Its table must have a generation column:
	// without one the artifacts of two executions of a job cannot be told
	// apart. Required.
	Guard *jobguard.Guard
	// DB runs compensation and sweeps, from Run's goroutine and from every
	// caller of Finalize and CompensateExecution at once, each compensation
	// in a short transaction of its own that must commit before the
	// artifact counts as done: a pool, never a caller's transaction.
	// Required.
	DB *pgxpool.Pool
	// Compensators undo artifacts, by kind. Record refuses a kind that has
	// none. Required: at least one.
	Compensators map[string]Func
	// Schema holds the artifacts table. Defaults to "", which resolves the
	// table through the connection's search_path.
	Schema string
	// Table is the artifacts table's name. Defaults to TableDefault.
	Table string
	// Interval is Run's pause between sweeps. Defaults to IntervalDefault.
	Interval time.Duration
	// MaxPerSweep bounds the artifacts one sweep compensates. Defaults to
	// MaxPerSweepDefault.
	MaxPerSweep int
	// RecheckAfter is how long after compensating an artifact, by the
	// database's clock, the sweep compensates it once more. The execution that recorded it may still
	// create it after the first compensation: an upload that outlived its
	// client's timeout, a worker that never learned it lost the job. Make it
	// longer than the longest write a worker can leave in flight. Defaults
	// to RecheckAfterDefault.
	RecheckAfter time.Duration
	// Logger receives compensation failures (with the stack of a
	// compensator's panic) and sweep reports, and an error line with the
	// stack when Run recovered the logger's or the meter's own panic.
	// Defaults to slog.Default().
	Logger *slog.Logger
	// Now stamps created_at and updated_at, which are there for an
	// operator to read: nothing compares them. When a recheck is due is
	// scheduled and decided on the database's clock alone, so processes
	// whose clocks disagree agree on it. Defaults to time.Now.
	Now func() time.Time
	// MeterProvider receives jobguard.compensations, counted by result
	// (done, pending). Defaults to nil: no metrics, at no cost.
	MeterProvider metric.MeterProvider
}

// Artifacts records what executions create and compensates what a rejected
// execution left behind. Build it with New; it is safe for concurrent use,
// and any number of processes may sweep the same table at once.
type Artifacts struct {
	cfg Config
	log *slog.Logger
	sql statements
	met *compensateMetrics
}

// statements are built once by New.
type statements struct {
	record  string // $1 job_id, $2 generation, $3 kind, $4 ref, $5 now → state, when new or owed again
	keep    string // $1 job_id, $2 generation, $3 now
	reject  string // $1 job_id, $2 generation, $3 now, $4 completed
	settle  string // $1 now, $2 completed → kept (sweep)
	promote string // $1 now, $2 failed → rejected (sweep)
	owed    string // $1 after id → the jobs table's next owed artifact, locked
	owedOf  string // $1 after id, $2 job_id, $3 generation → the execution's next owed artifact, locked
	due     string // $1 after id → one artifact whose recheck is due, locked
	lock    string // $1 kind, $2 ref → whether this transaction now holds the ref's lock
	held    string // $1 kind, $2 ref, $3 id → whether another execution may complete with the ref, or did
	done    string // $1 id, $2 now, $3 recheck after (µs) or NULL for none
	spare   string // $1 id, $2 now
	retry   string // $1 id, $2 now, $3 error
}

// New validates cfg, checks that the artifacts table exists and reads the
// type of the jobs table's id column (job ids are stored as text and cast
// to it, so the sweep's join uses the jobs table's primary key), and builds
// every statement once.
func New(ctx context.Context, cfg Config) (*Artifacts, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("compensate: new: %w", err)
	}
	cfg = cfg.withDefaults()
	art, err := ident.QuoteTable(cfg.Schema, cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("compensate: new: %w", err)
	}
	cat, err := inspect(ctx, cfg, art)
	if err != nil {
		return nil, fmt.Errorf("compensate: new: %w", err)
	}
	return &Artifacts{cfg: cfg, log: cfg.Logger, sql: buildStatements(cfg, cat), met: newCompensateMetrics(cfg.MeterProvider)}, nil
}

// validate checks what New cannot default, naming the field.
func (cfg Config) validate() error {
	switch {
	case cfg.Guard == nil:
		return errors.New("Guard is nil")
	case !cfg.Guard.Fenced():
		return errors.New("Guard: the jobs table has no generation column, so executions cannot be told apart")
	case cfg.DB == nil:
		return errors.New("DB is nil")
	case len(cfg.Compensators) == 0:
		return errors.New("Compensators is empty")
	case cfg.MaxPerSweep < 0:
		return fmt.Errorf("MaxPerSweep %d is negative", cfg.MaxPerSweep)
	}
	if err := errors.Join(interval.Check("Interval", cfg.Interval), interval.Check("RecheckAfter", cfg.RecheckAfter)); err != nil {
		return err
	}
	for kind, fn := range cfg.Compensators {
		if kind == "" || fn == nil {
			return fmt.Errorf("Compensators[%q]: kind is empty or func is nil", kind)
		}
	}
	return nil
}

// withDefaults fills in every field left at its zero value.
func (cfg Config) withDefaults() Config {
	if cfg.Table == "" {
		cfg.Table = TableDefault
	}
	if cfg.Interval == 0 {
		cfg.Interval = IntervalDefault
	}
	if cfg.MaxPerSweep == 0 {
		cfg.MaxPerSweep = MaxPerSweepDefault
	}
	if cfg.RecheckAfter == 0 {
		cfg.RecheckAfter = RecheckAfterDefault
	}
	// The logger is the caller's code, called right after the state
	// changes it reports: its panic must not undo them.
	cfg.Logger = safe.Logger(cfg.Logger)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg
}

// catalogFacts are what New reads of the catalog.
type catalogFacts struct {
	// canonical is the artifacts table's schema-qualified name as the
	// catalog holds it, however Config spelled it.
	canonical string
	// idType is the type of the jobs table's id column as the catalog
	// prints it: job ids are stored as text and cast to it, so the sweep's
	// join uses the jobs table's primary key.
	idType string
	// owedIndex: the table has the owed index of MigrationFiles (0005):
	// a valid b-tree whose key is the execution's key and the id, plain
	// columns, each compared as the column compares it (its own collation,
	// its type's default operator class), for the owed rows. INCLUDE
	// columns beside them do not matter; a key the statements' equalities
	// cannot use (another collation or operator class) is taken for
	// absent.
	owedIndex bool
}

// owedPredicate is the owed index's predicate (MigrationFiles, 0005) as
// the server prints it.
const owedPredicate = `((state COLLATE "C") = 'rejected'::text)`

// inspect checks, in one query, that the artifacts table art exists with
// every column of MigrationFiles, and reads its canonical name, the jobs
// table's id type and whether the owed index is there (a table without it
// works, one execution's compensation reading more rows).
func inspect(ctx context.Context, cfg Config, art string) (catalogFacts, error) {
	jt := cfg.Guard.Table()
	var f catalogFacts
	var name, idType *string
	var recheck, keyed, dated bool
	err := cfg.DB.QueryRow(ctx, `SELECT
		(SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname) FROM pg_class c
		 JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)),
		EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'recheck_at' AND NOT attisdropped),
		EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'jobs_table' AND NOT attisdropped),
		EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'changed_at' AND NOT attisdropped),
		(SELECT format_type(atttypid, NULL) FROM pg_attribute
		 WHERE attrelid = to_regclass($2) AND attname = $3 AND NOT attisdropped),
		EXISTS (SELECT 1 FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid JOIN pg_am am ON am.oid = x.relam
		 WHERE i.indrelid = to_regclass($1) AND i.indisvalid AND i.indisready AND am.amname = 'btree'
		 AND i.indexprs IS NULL AND i.indnkeyatts = 4 AND pg_get_expr(i.indpred, i.indrelid) = $4
		 AND (SELECT array_agg(a.attname::text ORDER BY k.n)
		      FROM unnest(i.indkey::int2[], i.indcollation::oid[], i.indclass::oid[]) WITH ORDINALITY AS k(attnum, coll, opc, n)
		      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		      JOIN pg_opclass o ON o.oid = k.opc
		      WHERE k.n <= i.indnkeyatts AND k.coll = a.attcollation AND o.opcdefault) = ARRAY['jobs_table', 'job_id', 'generation', 'id'])`,
		art, jt.QualifiedName(), jt.IDColumn, owedPredicate).Scan(&name, &recheck, &keyed, &dated, &idType, &f.owedIndex)
	switch {
	case err != nil:
		return f, err
	case name == nil:
		return f, fmt.Errorf("Table: %s does not exist (apply Migration)", art)
	case !recheck:
		return f, fmt.Errorf("Table: %s has no column recheck_at (apply every file of MigrationFiles)", art)
	case !keyed:
		return f, fmt.Errorf("Table: %s has no column jobs_table (apply every file of MigrationFiles)", art)
	case !dated:
		return f, fmt.Errorf("Table: %s has no column changed_at (apply every file of MigrationFiles)", art)
	case idType == nil:
		return f, fmt.Errorf("Guard: %s has no column %s", jt.QualifiedName(), jt.IDColumn)
	}
	f.canonical, f.idType = *name, *idType
	return f, nil
}

// buildStatements builds the statements from what inspect read of the
// catalog.
func buildStatements(cfg Config, cat catalogFacts) statements {
	idType := cat.idType
	q := ident.Quote
	art := q(cfg.Schema, cfg.Table)
	jt := cfg.Guard.Table()
	jobs := jt.QualifiedName()
	jid, jstatus, jgen := q(jt.IDColumn), q(jt.StatusColumn), q(jt.GenerationColumn)
	// An artifact is of the execution of a job of one jobs table: the
	// table's key is written into every statement that reads or writes
	// artifacts by their execution, so that the jobs tables sharing one
	// artifacts table (job 42 of two integer-id tables) never decide or
	// compensate each other's artifacts. Only a thing's other records (its
	// kind and ref, and their lock) are looked up across tables: a file is
	// one file whoever made it.
	jobsKey := ident.Literal(cfg.Guard.TableKey())
	mine := `a.jobs_table = ` + jobsKey
	// A job row is matched by casting the artifact's job id to the id
	// column's type, so the lookup uses the jobs table's primary key. Only
	// the rows of this jobs table are cast (mine filters the scan of the
	// artifacts before the join), so another table's ids never reach the
	// cast.
	match := fmt.Sprintf(`j.%s = a.job_id::%s`, jid, idType)
	// norm is the job id parameter $n: the job's canonical id, as the
	// calls that take an execution turn it (Guard.CanonicalID).
	norm := func(n int) string { return fmt.Sprintf(`$%d::text`, n) }

	var s statements
	// Recording an artifact and compensating one take the same transaction
	// lock on its kind and ref, so that one execution never records (and
	// then creates) a thing while another's compensation is removing it.
	// The lock class keeps these locks apart per artifacts table, by its
	// canonical name: processes that spell the table differently (through
	// the search_path, or with its schema) take the same locks.
	refLock := func(fn string, kind, ref int) string {
		return fmt.Sprintf(`%s(%d, hashtext($%d::text || '/' || $%d::text))`, fn, lockClass(cat.canonical), kind, ref)
	}
	// The job id is stored as the id column prints it (the calls turn it
	// so), so that one job is always one key, whatever its spelling, and
	// with its jobs table. Recording an artifact that was compensated, or
	// is owed compensation, marks it owed again and returns it: its
	// execution lost its job and is about to create it anyway. No row comes
	// back for an artifact recorded before that may still be kept.
	s.record = fmt.Sprintf(`WITH l AS (SELECT %s) INSERT INTO %s AS a (jobs_table, job_id, generation, kind, ref, created_at, updated_at)`+
		` SELECT %s, %s, $2, $3, $4, $5, $5 FROM l ON CONFLICT (jobs_table, job_id, generation, kind, ref) DO UPDATE`+
		` SET state = 'rejected', recheck_at = NULL, updated_at = $5 WHERE a.state IN ('done', 'rejected')`+
		` RETURNING a.state`,
		refLock("pg_advisory_xact_lock", 3, 4), art, jobsKey, norm(1))
	// Keeping reaches the execution's artifacts through its key. The
	// state is compared under the C collation (the same result for this
	// label), so that it implies no partial index's predicate: the index
	// of the open artifacts leads with the jobs table and the state, and
	// the planner, with few pending artifacts or none analyzed, finds it as
	// cheap as the key, though a scan of it reads every pending artifact
	// of the jobs table to find the execution's own.
	s.keep = `UPDATE ` + art + ` a SET state = 'kept', updated_at = $3` +
		` WHERE ` + mine + ` AND a.job_id = ` + norm(1) + ` AND a.generation = $2 AND a.state COLLATE "C" = 'pending'`
	// A rejected completion owes compensation for the execution's artifacts,
	// unless the job row shows this very execution completed (a finalize
	// retried after a lost commit acknowledgement). Those compensated
	// already are owed again: the execution may have created them after
	// that compensation, and this is its last word.
	s.reject = fmt.Sprintf(`UPDATE %s a SET state = 'rejected', recheck_at = NULL, updated_at = $3`+
		` WHERE %s AND a.job_id = %s AND a.generation = $2 AND a.state IN ('pending', 'done')`+
		` AND NOT EXISTS (SELECT 1 FROM %s j WHERE %s AND j.%s::int8 = a.generation AND j.%s::text = $4)`,
		art, mine, norm(1), jobs, match, jgen, jstatus)
	// The sweep settles pending artifacts whose execution is decided: kept
	// once it completed, owed once it can never complete (the job failed,
	// or a newer generation owns it; both are final for this execution). A
	// job that is gone decides nothing: its artifacts stay pending. Rows
	// another sweeper is settling are skipped, not waited for, so sweepers
	// never deadlock on each other.
	settle := func(state, cond string) string {
		return fmt.Sprintf(`UPDATE %s SET state = '%s', updated_at = $1 WHERE id IN (`+
			`SELECT a.id FROM %s a JOIN %s j ON %s`+
			` WHERE %s AND a.state = 'pending' AND %s FOR UPDATE OF a SKIP LOCKED)`,
			art, state, art, jobs, match, mine, cond)
	}
	s.settle = settle("kept", fmt.Sprintf(`j.%s::int8 = a.generation AND j.%s::text = $2`, jgen, jstatus))
	s.promote = settle("rejected", fmt.Sprintf(`(j.%s::int8 <> a.generation OR j.%s::text = $2)`, jgen, jstatus))
	const cols = `id, job_id, generation, kind, ref, attempts`
	s.owed = `SELECT ` + cols + ` FROM ` + art + ` a` +
		` WHERE ` + mine + ` AND state = 'rejected' AND id > $1` +
		` ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED`
	// One execution's owed artifacts are taken through the owed index
	// (MigrationFiles, 0005): its execution's key, then the id, so that
	// each step reaches the next one at once. The state is compared under
	// the C collation, as the index's predicate is, so that the statement
	// implies that predicate and not the open artifacts' index's: that
	// index leads with the jobs table and the state, and a scan of it reads
	// the jobs table's whole owed backlog (it grows while compensations
	// fail) to find the execution's. Without the owed index (New looks for
	// it) the order is on id + 0, so that the primary key's order, which
	// would read every artifact of the jobs table recorded before the
	// execution's, cannot serve either: the execution's key does, and each
	// step reads the execution's artifacts.
	order := `id + 0`
	if cat.owedIndex {
		order = `id`
	}
	s.owedOf = `SELECT ` + cols + ` FROM ` + art + ` a` +
		` WHERE ` + mine + ` AND job_id = ` + norm(2) + ` AND generation = $3::int8` +
		` AND state COLLATE "C" = 'rejected' AND id > $1` +
		` ORDER BY ` + order + ` LIMIT 1 FOR UPDATE SKIP LOCKED`
	// When a recheck is due is the database's business alone: it is
	// scheduled and compared on statement_timestamp(), so that processes
	// whose clocks disagree agree on it. A sweeper whose clock ran ahead
	// would recheck at once, before an upload in flight lands, and one
	// behind would recheck late or never.
	s.due = `SELECT ` + cols + ` FROM ` + art + ` a` +
		` WHERE ` + mine + ` AND state = 'done' AND recheck_at IS NOT NULL AND id > $1 AND recheck_at <= statement_timestamp()` +
		` ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED`
	s.lock = `SELECT ` + refLock("pg_try_advisory_xact_lock", 1, 2)
	// Another execution holds the thing while its artifact may still be
	// kept (pending) or was (kept): the thing is its output now.
	s.held = `SELECT EXISTS (SELECT 1 FROM ` + art +
		` WHERE kind = $1 AND ref = $2 AND id <> $3 AND state IN ('pending', 'kept'))`
	s.done = `UPDATE ` + art + ` SET state = 'done', attempts = attempts + 1, last_error = NULL,` +
		` recheck_at = statement_timestamp() + ` + interval.Param("$3") + `,` +
		` updated_at = $2 WHERE id = $1 AND state IN ('rejected', 'done')`
	s.spare = `UPDATE ` + art + ` SET state = 'done', last_error = NULL, recheck_at = NULL, updated_at = $2` +
		` WHERE id = $1 AND state IN ('rejected', 'done')`
	// A failed compensation, first or second, leaves the artifact owed. It
	// is conditional on the attempts read ($4), so that when it runs
	// outside the transaction that locked the row (that one broke) it
	// writes nothing over another sweep's later attempt.
	s.retry = `UPDATE ` + art + ` SET state = 'rejected', attempts = attempts + 1, last_error = $3, recheck_at = NULL,` +
		` updated_at = $2 WHERE id = $1 AND attempts = $4 AND state IN ('rejected', 'done')`
	return s
}

// Record tags an artifact with the execution that created it, before the
// execution completes. When the artifact is a row, pass the transaction
// (the pgx.Tx) that inserts it, so that the row and its record commit
// together, and roll back together; a file or object is recorded before it
// is created, so that a crash in between leaves a record of something that
// may not exist (compensators treat a missing artifact as done) rather than
// an untracked file.
//
// Recording the same artifact twice is a no-op while its execution may
// still complete. Once the artifact has been compensated, or is owed
// compensation, Record returns ErrCompensated: the execution lost its job,
// and should not create the thing. The artifact is owed again, so that if
// it is created anyway the next sweep removes it.
//
// Record waits while a compensation of the same kind and ref (another
// execution's) is running, so that nothing it is about to create is
// removed by a compensation that began before it. Inside your transaction
// it holds that ref until you commit, and a compensation of it is left for
// a later sweep. Give each execution refs of its own (put the generation in
// a path) where you can: two executions that create the same thing may
// overwrite each other's content, which no record can undo. An empty ref is
// refused: it names nothing, and would be the same ref for every execution
// of its kind.
func (a *Artifacts) Record(ctx context.Context, db jobguard.DB, exec jobguard.Execution, kind, ref string) error {
	if _, ok := a.cfg.Compensators[kind]; !ok {
		return fmt.Errorf("compensate: record: no compensator for kind %q", kind)
	}
	if ref == "" {
		return errors.New("compensate: record: ref is empty; name the thing (a path, a key, a row id)")
	}
	exec, err := a.canonical(exec)
	if err != nil {
		return fmt.Errorf("compensate: record: %w", err)
	}
	var state string
	err = db.QueryRow(ctx, a.sql.record, exec.JobID, exec.Generation, kind, ref, a.cfg.Now()).Scan(&state)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil // recorded before, by an execution that may still complete
	case err != nil:
		return fmt.Errorf("compensate: record: %w", err)
	case state == "rejected":
		err := fmt.Errorf("compensate: record: %w: %s %q of job %s generation %d is owed again",
			ErrCompensated, kind, ref, exec.JobID, exec.Generation)
		if a.requeued(ctx, db, exec) {
			// Lost to another attempt, as the execution's save would say:
			// the queue must deliver the job again.
			err = fmt.Errorf("%w (%w)", err, jobguard.ErrRequeued)
		}
		return err
	}
	return nil
}

// requeued reports whether exec's job row is QUEUED again under a newer
// generation (a rescue, an operator's Retry); false when the row cannot be
// read, or on a table without a generation column.
func (a *Artifacts) requeued(ctx context.Context, db jobguard.DB, exec jobguard.Execution) bool {
	g := a.cfg.Guard
	if !g.Fenced() {
		return false
	}
	rows, err := jobset.New(g).Snapshot(ctx, db, []string{exec.JobID})
	if err != nil {
		return false
	}
	row, found := rows[exec.JobID]
	return found && row.Status == g.Table().Statuses.Queued && row.Generation > exec.Generation
}

// canonical returns exec under its job's canonical id, the one its
// artifacts are keyed by, or an error wrapping jobguard.ErrInvalidJobID.
func (a *Artifacts) canonical(exec jobguard.Execution) (jobguard.Execution, error) {
	id, err := a.cfg.Guard.CanonicalID(exec.JobID)
	if err != nil {
		return exec, err
	}
	exec.JobID = id
	return exec, nil
}

// lockClass is the first key of the transaction locks on an artifacts
// table's refs: a hash of the table's canonical name, so that two tables
// do not share locks. (Advisory locks keyed by one bigint, like the
// reclaimer's leader lock, are another key space.)
func lockClass(table string) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(table))
	return int32(h.Sum32())
}
