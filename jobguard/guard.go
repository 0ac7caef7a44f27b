package jobguard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/internal/guardlink"
	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/jobguard/marker"
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
	set    guardlink.SetStatements // package jobset's
	shared Shared
	met    *guardMetrics
	// unmapped are the table's columns under an optional column's default
	// name that the mapping leaves out.
	unmapped []UnmappedColumn
	// markerTable is the table of reclaim markers (marker.TableName) as
	// the catalog names it, or "" when the search_path had none at New.
	markerTable string
}

type idKind int

const (
	idText idKind = iota
	idUUID
	idInt
	idChar // char(n): trailing spaces are no part of the value
)

// statements are built once by New. Parameter positions are fixed per
// statement and documented beside each.
type statements struct {
	completeActive     guarded // $1 id [, $2 generation]
	completeProcessing guarded // $1 id [, $2 generation]
	fail               guarded // $1 id, $2 reason [, $3 generation]
	touch              guarded // $1 id [, $2 generation]
	touchProgress      guarded // $1 id, $2 progress [, $3 generation]
	retry              guarded // $1 id → generation
	cancel             guarded // $1 id, $2 reason, $3 channel, $4 canonical id, $5 table key → generation
	start              string  // $1 id, $2 refused reasons (reclaimed, cancelled) [, $3 marker generation] [, owner] → generation
	// started and completed are what Start and Resume accept of a row,
	// for whyRefused: Start's SQL is start or startMarked, Resume writes
	// nothing.
	started, completed guarded
	// startMarked is start with the marker table's evidence read in the
	// same statement: $1 id, $2 refused reasons, $3 table key, $4
	// canonical id [, $5 owner] → generation. Empty without a marker
	// table.
	startMarked string
	inspect     string // $1 id → status, failure_reason, generation
}

// New validates table against the database's catalog and builds every
// statement the guard will run. A missing table or column, a column of an
// unusable type, or status labels that an enum lacks are reported here, not
// at the first completion. A column under an optional column's default
// name that table leaves out is warned of on slog's default logger (see
// Table); NewWithConfig takes a logger of its own. New is NewWithConfig
// with the zero GuardConfig.
func New(ctx context.Context, db DB, table Table) (*Guard, error) {
	return NewWithConfig(ctx, db, table, GuardConfig{})
}

// newGuard is New's work: the mapping checked against the catalog and
// every statement built.
func newGuard(ctx context.Context, db DB, table Table) (*Guard, error) {
	if db == nil {
		return nil, errors.New("jobguard: new: db is nil")
	}
	table = table.WithDefaults()
	if err := table.validate(); err != nil {
		return nil, fmt.Errorf("jobguard: new: Table: %w", err)
	}
	cat, err := inspectCatalog(ctx, db, table)
	if err != nil {
		return nil, fmt.Errorf("jobguard: new: %w", err)
	}
	g := &Guard{table: table, cat: cat, unmapped: table.unmapped(cat), shared: sharedDefaults, met: noGuardMetrics}
	switch id := cat.columns[table.IDColumn]; {
	case id.name == "uuid":
		g.idKind = idUUID
	case isInteger(id):
		g.idKind = idInt
		g.idBits = intBits[id.name]
	case id.name == "bpchar":
		g.idKind = idChar
	}
	if g.markerTable, err = lookupMarkerTable(ctx, db); err != nil {
		return nil, fmt.Errorf("jobguard: new: %w", err)
	}
	g.sql = buildStatements(table, cat, g.markerTable)
	g.set = buildSetStatements(table, cat)
	return g, nil
}

// Table returns the guard's table mapping with every default filled in.
func (g *Guard) Table() Table { return g.table }

// TableKey names the guard's jobs table wherever something kept outside
// it names one of its jobs: the rows of the side tables that several jobs
// tables may share (usage's ledger, settle's records, compensate's
// artifacts), the reclaim markers and the reclaim notices. It is the
// table's schema and name as the catalog holds them, each in double
// quotes, as in "public"."jobs": it does not depend on how Table spells
// them or on the connection's search_path, so every process working the
// table agrees on it, and two tables never share it. Renaming the table
// or moving it to another schema changes it; see the side tables'
// migrations for how to move their rows along.
func (g *Guard) TableKey() string { return g.cat.key }

// MarkerPlace says where the reclaim markers of the guard's jobs live:
// under Shared.Prefix in Redis, or in the marker table (marker.TableName)
// that New found on the search_path ("" when it found none). Package
// marker's stores ask it, so that they keep the markers where the
// reclaimer and the start guards look.
func (g *Guard) MarkerPlace() marker.Place {
	return marker.Place{Prefix: g.shared.Prefix, Table: g.markerTable}
}

// lookupMarkerTable returns the marker table the search_path finds, as the
// catalog names it, or "" when there is none.
func lookupMarkerTable(ctx context.Context, db DB) (string, error) {
	schema, rel, err := catalogName(ctx, db, ident.Quote(marker.TableName))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("look up table %s: %w", marker.TableName, err)
	}
	return ident.Quote(schema, rel), nil
}

// Unmapped lists the columns of the table under an optional column's
// default name (GenerationColumnDefault, TypeColumnDefault, ...) that the
// mapping leaves out, of a type the field would take: New warned of each.
// Set the field to map one.
func (g *Guard) Unmapped() []UnmappedColumn { return slices.Clone(g.unmapped) }

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

func buildStatements(t Table, cat catalog, markerTable string) statements {
	q := ident.Quote
	tbl := t.QualifiedName()
	id, status, reason := q(t.IDColumn), q(t.StatusColumn), q(t.FailureReasonColumn)
	touch := fmt.Sprintf("%s = %s", q(t.UpdatedAtColumn), nowExpr(cat.columns[t.UpdatedAtColumn]))
	st := t.Statuses
	lit := ident.Literal

	// write builds a guarded UPDATE: set, then the job's id and one of the
	// allowed statuses, then the execution's generation on a fenced table.
	// values is how many parameters of the call's own come after the id.
	write := func(op Op, set string, values int, allowed ...string) guarded {
		in := make([]string, len(allowed))
		for i, a := range allowed {
			in[i] = lit(a)
		}
		sql := fmt.Sprintf(`UPDATE %s SET %s WHERE %s = $1 AND %s IN (%s)`, tbl, set, id, status, strings.Join(in, ", "))
		if t.GenerationColumn != "" {
			sql += fmt.Sprintf(" AND %s = $%d", q(t.GenerationColumn), values+2)
		}
		return guarded{op: op, sql: sql, allowed: allowed, fenced: t.GenerationColumn != "", queued: st.Queued}
	}
	genOut, bump := "0::int8", ""
	if t.GenerationColumn != "" {
		gen := q(t.GenerationColumn)
		genOut = gen + "::int8"
		bump = fmt.Sprintf(", %s = %s + 1", gen, gen)
	}
	var done, reset, started, unstart, disown string
	if t.ProgressColumn != "" {
		done = fmt.Sprintf(", %s = 100", q(t.ProgressColumn))
		reset = fmt.Sprintf(", %s = 0", q(t.ProgressColumn))
	}
	if t.StartedAtColumn != "" {
		sa := q(t.StartedAtColumn)
		started = fmt.Sprintf(", %s = %s", sa, nowExpr(cat.columns[t.StartedAtColumn]))
		unstart = fmt.Sprintf(", %s = NULL", sa)
	}

	if t.OwnerColumn != "" {
		disown = fmt.Sprintf(", %s = NULL", q(t.OwnerColumn))
	}
	// own writes the owner of the new execution, parameter n, in Start's
	// own statement: no round trip of its own.
	own := func(n int) string {
		if t.OwnerColumn == "" {
			return ""
		}
		return fmt.Sprintf(", %s = $%d::text", q(t.OwnerColumn), n)
	}

	var s statements
	completed := fmt.Sprintf("%s = %s, %s%s", status, lit(st.Completed), touch, done)
	s.completeActive = write(OpComplete, completed, 0, st.Queued, st.Processing)
	s.completeProcessing = write(OpComplete, completed, 0, st.Processing)
	s.fail = write(OpFail, fmt.Sprintf("%s = %s, %s = %s, %s", status, lit(st.Failed), reason,
		cat.columns[t.FailureReasonColumn].fitted("$2"), touch), 1, st.Queued, st.Processing)
	s.touch = write(OpTouch, touch, 0, st.Processing)
	if t.ProgressColumn != "" {
		s.touchProgress = write(OpTouch, fmt.Sprintf("%s, %s = $2", touch, q(t.ProgressColumn)), 1, st.Processing)
	}
	// Retry is no execution's write: it is not fenced, and it bumps the
	// generation instead.
	s.retry = guarded{op: OpRetry, allowed: []string{st.Failed}, sql: fmt.Sprintf(
		`UPDATE %s SET %s = %s, %s = NULL, %s%s%s%s%s WHERE %s = $1 AND %s = %s RETURNING %s`,
		tbl, status, lit(st.Queued), reason, touch, bump, reset, unstart, disown, id, status, lit(st.Failed), genOut)}
	s.cancel = cancelStatement(t, cat, st, bump, genOut)
	// start moves a job that is not reclaimed to PROCESSING; fence adds
	// what the markers say. The reason is compared byte by byte, as
	// Shared.Reclaimed compares it (under a nondeterministic collation of
	// the column's own, starts_with is refused outright). The row is j, and
	// the fence compares with j:
	// the table's bare name would mean whatever the subquery names so (a
	// jobs table called m is the marker's alias m there).
	start := func(fence string, owner int) string {
		return fmt.Sprintf(
			`UPDATE %s AS j SET %s = %s, %s%s%s%s WHERE %s = $1 AND %s IN (%s, %s)`+
				` AND (j.%s IS NULL OR NOT EXISTS (SELECT FROM unnest($2::text[]) AS refused(prefix) WHERE starts_with(j.%s COLLATE "C", refused.prefix)))%s RETURNING %s`,
			tbl, status, lit(st.Processing), touch, bump, started, own(owner), id, status, lit(st.Queued), lit(st.Processing),
			reason, reason, fence, genOut)
	}
	markerFence, liveFence := "", ""
	if t.GenerationColumn != "" {
		markerFence = fmt.Sprintf(" AND %s > $3", q(t.GenerationColumn))
		// A marker of an older generation was bumped past by a Retry.
		liveFence = " AND m.generation >= j." + q(t.GenerationColumn)
	}
	// The owner is the last parameter: $4 after the marker's generation
	// on a fenced table, $3 without one.
	ownerParam := 3
	if t.GenerationColumn != "" {
		ownerParam = 4
	}
	s.start = start(markerFence, ownerParam)
	s.started = guarded{op: OpStart, allowed: []string{st.Queued, st.Processing}}
	s.completed = guarded{op: OpResume, allowed: []string{st.Completed}, fenced: t.GenerationColumn != "", queued: st.Queued}
	if markerTable != "" {
		s.startMarked = start(fmt.Sprintf(` AND NOT EXISTS (SELECT FROM %s m WHERE m.jobs_table = $3 AND m.job_id = $4`+
			` AND m.expires_at > statement_timestamp()%s)`, markerTable, liveFence), 5)
	}
	s.inspect = fmt.Sprintf(
		`SELECT %s::text, %s::text, %s FROM %s WHERE %s = $1`,
		status, reason, genOut, tbl, id)
	return s
}

// intBits are the widths of the integer types an id column may have.
var intBits = map[string]int{"int2": 16, "int4": 32, "int8": 64}

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

// refusal explains a zero-row write w of exec by reading the row right
// after it, against the statuses w accepts. The error names the job by its
// canonical id, id's, whatever spelling exec has.
func (g *Guard) refusal(ctx context.Context, db DB, w guarded, id any, exec Execution, kind error) error {
	r, found, err := g.inspect(ctx, db, id)
	e := whyRefused(w, canonicalID(id), exec.Generation, kind, r, found, err)
	if err != nil {
		// The write's answer stands; only the explanation is missing.
		return fmt.Errorf("%w (%v)", e, err)
	}
	return e
}
