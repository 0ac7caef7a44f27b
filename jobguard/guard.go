package jobguard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/internal/ident"
)

// DB is what the guard needs of a database handle. *pgxpool.Pool, *pgx.Conn
// and pgx.Tx all satisfy it. Pass a pgx.Tx to make a guarded write part of
// your own transaction: it then takes effect when you commit. Finalize is
// the exception: it reports what committed, so it refuses a transaction with
// ErrInTransaction (see the package doc, "Inside your transaction").
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

var (
	_ DB = (*pgxpool.Pool)(nil)
	_ DB = (*pgx.Conn)(nil)
	_ DB = (pgx.Tx)(nil)
)

// Execution is one run of a job: the job id and the generation that Start
// gave it. Every write the execution makes carries the generation, so once
// the job is restarted by any path the old execution can change nothing.
type Execution struct {
	JobID      string
	Generation int64
}

// Guard holds a validated table mapping and the statements built from it.
// It is safe for concurrent use.
type Guard struct {
	table  Table
	cat    catalog
	idKind idKind
	idBits int // width of an integer id column: 16, 32 or 64
	sql    statements
	batch  batchStatements
	met    *guardMetrics
}

type idKind int

const (
	idText idKind = iota
	idUUID
	idInt
)

// statements are built once by New. Parameter positions are fixed per
// statement and documented beside each builder.
type statements struct {
	completeActive     string // $1 id, $2 completed, $3 queued, $4 processing [, $5 generation]
	completeProcessing string // $1 id, $2 completed, $3 processing [, $4 generation]
	fail               string // $1 id, $2 failed, $3 reason, $4 queued, $5 processing [, $6 generation]
	retry              string // $1 id, $2 queued, $3 failed → generation
	start              string // $1 id, $2 processing, $3 queued, $4 reclaimed reason [, $5 marker generation] → generation
	inspect            string // $1 id → status, failure_reason, generation
	touch              string // $1 id, $2 processing [, $3 generation]
	touchProgress      string // $1 id, $2 processing, $3 progress [, $4 generation]
}

// New validates table against the database's catalog and builds every
// statement the guard will run. A missing table or column, a column of an
// unusable type, or status labels that an enum lacks are reported here, not
// at the first completion.
func New(ctx context.Context, db DB, table Table) (*Guard, error) {
	if db == nil {
		return nil, errors.New("jobguard: new: db is nil")
	}
	table = table.withDefaults()
	if err := table.validate(); err != nil {
		return nil, fmt.Errorf("jobguard: new: Table: %w", err)
	}
	cat, err := inspectCatalog(ctx, db, table)
	if err != nil {
		return nil, fmt.Errorf("jobguard: new: %w", err)
	}
	g := &Guard{table: table, cat: cat, met: noGuardMetrics}
	switch id := cat.columns[table.IDColumn]; {
	case id.name == "uuid":
		g.idKind = idUUID
	case isInteger(id):
		g.idKind = idInt
		g.idBits = intBits[id.name]
	}
	g.sql = buildStatements(table, cat)
	g.batch = buildBatchStatements(table, cat)
	return g, nil
}

// Table returns the guard's table mapping with every default filled in.
func (g *Guard) Table() Table { return g.table }

// Fenced reports whether the table has a generation column, so that writes
// of an execution are fenced by its generation. Without one the guard runs in
// status-only mode.
func (g *Guard) Fenced() bool { return g.table.GenerationColumn != "" }

// nowExpr is the SQL that stamps a timestamp column with the time of the
// write: as is for timestamptz, as UTC wall time for timestamp without time
// zone (what ORMs such as Prisma store there).
//
// It is statement_timestamp(), not now(): now() is the start of the
// transaction, so a heartbeat written late in a caller's long transaction
// would record when the transaction began and look older to the reclaimer
// than the progress it reports. Nor clock_timestamp(): that moves during a
// statement, so Start's updated_at and started_at, or the rows of one
// batched reclaim, would get different times, while the start of the
// statement is already later than the evidence the caller reports.
func nowExpr(ti typeInfo) string {
	if ti.name == "timestamp" {
		return "(statement_timestamp() AT TIME ZONE 'UTC')"
	}
	return "statement_timestamp()"
}

func buildStatements(t Table, cat catalog) statements {
	q := ident.Quote
	tbl := t.QualifiedName()
	id, status, reason := q(t.IDColumn), q(t.StatusColumn), q(t.FailureReasonColumn)
	touch := fmt.Sprintf("%s = %s", q(t.UpdatedAtColumn), nowExpr(cat.columns[t.UpdatedAtColumn]))

	fence := func(n int) string {
		if t.GenerationColumn == "" {
			return ""
		}
		return fmt.Sprintf(" AND %s = $%d", q(t.GenerationColumn), n)
	}
	genOut, bump := "0::int8", ""
	if t.GenerationColumn != "" {
		gen := q(t.GenerationColumn)
		genOut = gen + "::int8"
		bump = fmt.Sprintf(", %s = %s + 1", gen, gen)
	}
	var done, reset, started, unstart string
	if t.ProgressColumn != "" {
		done = fmt.Sprintf(", %s = 100", q(t.ProgressColumn))
		reset = fmt.Sprintf(", %s = 0", q(t.ProgressColumn))
	}
	if t.StartedAtColumn != "" {
		sa := q(t.StartedAtColumn)
		started = fmt.Sprintf(", %s = %s", sa, nowExpr(cat.columns[t.StartedAtColumn]))
		unstart = fmt.Sprintf(", %s = NULL", sa)
	}

	var s statements
	s.completeActive = fmt.Sprintf(
		`UPDATE %s SET %s = $2, %s%s WHERE %s = $1 AND %s IN ($3, $4)%s`,
		tbl, status, touch, done, id, status, fence(5))
	s.completeProcessing = fmt.Sprintf(
		`UPDATE %s SET %s = $2, %s%s WHERE %s = $1 AND %s = $3%s`,
		tbl, status, touch, done, id, status, fence(4))
	s.fail = fmt.Sprintf(
		`UPDATE %s SET %s = $2, %s = $3, %s WHERE %s = $1 AND %s IN ($4, $5)%s`,
		tbl, status, reason, touch, id, status, fence(6))
	s.retry = fmt.Sprintf(
		`UPDATE %s SET %s = $2, %s = NULL, %s%s%s%s WHERE %s = $1 AND %s = $3 RETURNING %s`,
		tbl, status, reason, touch, bump, reset, unstart, id, status, genOut)
	markerFence := ""
	if t.GenerationColumn != "" {
		markerFence = fmt.Sprintf(" AND %s > $5", q(t.GenerationColumn))
	}
	s.start = fmt.Sprintf(
		`UPDATE %s SET %s = $2, %s%s%s WHERE %s = $1 AND %s IN ($3, $2)`+
			` AND (%s IS NULL OR NOT starts_with(%s, $4))%s RETURNING %s`,
		tbl, status, touch, bump, started, id, status, reason, reason, markerFence, genOut)
	s.touch = fmt.Sprintf(
		`UPDATE %s SET %s WHERE %s = $1 AND %s = $2%s`,
		tbl, touch, id, status, fence(3))
	s.touchProgress = s.touch
	if t.ProgressColumn != "" {
		s.touchProgress = fmt.Sprintf(
			`UPDATE %s SET %s, %s = $3 WHERE %s = $1 AND %s = $2%s`,
			tbl, touch, q(t.ProgressColumn), id, status, fence(4))
	}
	s.inspect = fmt.Sprintf(
		`SELECT %s::text, %s::text, %s FROM %s WHERE %s = $1`,
		status, reason, genOut, tbl, id)
	return s
}

// intBits are the widths of the integer types an id column may have.
var intBits = map[string]int{"int2": 16, "int4": 32, "int8": 64}

// idArg turns a job id into the argument the id column takes, so that a
// malformed id is refused before any SQL is sent (a bad uuid inside a
// transaction would otherwise abort it). An integer is parsed at the
// column's own width: one past its range names no row, and sent on it would
// fail as a driver or server error that looks retryable.
func (g *Guard) idArg(jobID string) (any, error) {
	if jobID == "" {
		return nil, fmt.Errorf("%w: job id is empty", ErrInvalidJobID)
	}
	switch g.idKind {
	case idUUID:
		u, err := uuid.Parse(jobID)
		if err != nil {
			return nil, fmt.Errorf("%w: %q is not a uuid (column %q is uuid)", ErrInvalidJobID, jobID, g.table.IDColumn)
		}
		return u.String(), nil
	case idInt:
		n, err := strconv.ParseInt(jobID, 10, g.idBits)
		if errors.Is(err, strconv.ErrRange) {
			return nil, fmt.Errorf("%w: %q is out of range for column %q (%s)",
				ErrInvalidJobID, jobID, g.table.IDColumn, g.cat.columns[g.table.IDColumn].name)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %q is not an integer (column %q is an integer)", ErrInvalidJobID, jobID, g.table.IDColumn)
		}
		return n, nil
	}
	return jobID, nil
}

// canonicalID is the text form of an id argument: the id as the column prints
// it, which is how markers and notices name the job.
func canonicalID(id any) string {
	if n, ok := id.(int64); ok {
		return strconv.FormatInt(n, 10)
	}
	return id.(string)
}

// row is a job's state as the inspect statement reads it.
type row struct {
	status, reason string
	generation     int64
}

// inspect reads a job's status, failure reason and generation. found is
// false when no row has the id.
func (g *Guard) inspect(ctx context.Context, db DB, id any) (r row, found bool, err error) {
	var reason *string
	err = db.QueryRow(ctx, g.sql.inspect, id).Scan(&r.status, &reason, &r.generation)
	if errors.Is(err, pgx.ErrNoRows) {
		return row{}, false, nil
	}
	if err != nil {
		return row{}, false, err
	}
	if reason != nil {
		r.reason = *reason
	}
	return r, true, nil
}

// refusal explains a zero-row conditional write of exec by reading the row
// right after it. allowed are the statuses the write accepts.
func (g *Guard) refusal(ctx context.Context, db DB, op string, id any, exec Execution, kind error, allowed ...string) error {
	e := &StateError{Op: op, JobID: exec.JobID, Want: exec.Generation, kind: kind}
	r, found, err := g.inspect(ctx, db, id)
	switch {
	case err != nil:
		// The write's answer stands; only the explanation is missing.
		return fmt.Errorf("%w (reading the job to explain: %v)", e, err)
	case !found:
		e.Reason = ReasonNotFound
	default:
		e.Status, e.Generation = r.status, r.generation
		switch {
		case g.Fenced() && op != "retry" && r.generation != exec.Generation:
			e.Reason = ReasonSuperseded
		case !slices.Contains(allowed, r.status):
			e.Reason = ReasonStatus
		}
	}
	return e
}
