package jobguard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/spell"
)

// Defaults of Table, matching the bundled migration.
const (
	TableNameDefault           = "jobs"
	IDColumnDefault            = "id"
	StatusColumnDefault        = "status"
	UpdatedAtColumnDefault     = "updated_at"
	FailureReasonColumnDefault = "failure_reason"

	// The names DefaultTable gives the optional columns. A mapping of its
	// own leaves an optional column out unless it names it; New warns of a
	// column under one of these names that the mapping leaves out
	// (Guard.Unmapped).
	GenerationColumnDefault = "generation"
	ProgressColumnDefault   = "progress"
	TypeColumnDefault       = "type"
	ParentIDColumnDefault   = "parent_id"
	StartedAtColumnDefault  = "started_at"
	OwnerColumnDefault      = "lease_id"

	StatusQueuedDefault     = "QUEUED"
	StatusProcessingDefault = "PROCESSING"
	StatusCompletedDefault  = "COMPLETED"
	StatusFailedDefault     = "FAILED"
)

// Table maps the caller's own jobs table. Required columns fall back to the
// bundled migration's names when left empty; optional columns are absent when
// left empty. DefaultTable returns the full mapping of the bundled migration.
// The jobguard command reads its config file's "table" and its table flags
// the same way.
//
// An optional column left out is a choice the guard cannot see, and each
// one costs something: without TypeColumn no per-type limit matches, without
// StartedAtColumn the table cannot say when an attempt started, without
// GenerationColumn stale executions are not fenced out. So New looks for a
// column under an optional column's default name (GenerationColumnDefault,
// ...) that the mapping leaves out, and warns of it on the guard's logger,
// naming the field to set (Guard.Unmapped lists them). It warns rather
// than refuses: a column called "type" may be some other type of the
// user's, and a Table has no way to say "absent on purpose" but to leave
// the field empty.
//
// A Prisma-style table is mapped by configuration alone:
//
//	jobguard.Table{
//		Name:                "CourseJob",
//		UpdatedAtColumn:     "updatedAt",
//		FailureReasonColumn: "failureReason",
//		GenerationColumn:    "generation",
//	}
type Table struct {
	// Schema holds the table. Defaults to "", which resolves the table through
	// the connection's search_path.
	Schema string
	// Name is the table's name. Defaults to "jobs".
	Name string
	// IDColumn is the primary key: uuid, text, varchar or an integer type
	// (int2, int4 or int8: an id out of the column's range is refused as
	// ErrInvalidJobID). NOT NULL. Defaults to "id".
	IDColumn string
	// StatusColumn holds one of Statuses: text, varchar or a Postgres enum that
	// has all four labels. NOT NULL. Defaults to "status".
	StatusColumn string
	// UpdatedAtColumn is the progress signal the reclaimer reads: timestamptz
	// or timestamp (written in UTC). NOT NULL: a row without one cannot be
	// judged, and would fail every sweep that reads it. Defaults to
	// "updated_at".
	UpdatedAtColumn string
	// FailureReasonColumn records why a job failed, and is where the start
	// guard looks for a reclaim. Nullable: NULL is "no failure", and Retry
	// writes it. text, or varchar(n) or char(n): a longer reason is cut to
	// n characters, and New refuses a Shared.ReclaimedReason longer than
	// n. Defaults to "failure_reason".
	FailureReasonColumn string

	// GenerationColumn is the fencing token (an integer type, NOT NULL
	// DEFAULT 0), bumped by every start and retry: a NULL there would make
	// every Start fail. Optional: when empty the guard runs in the weaker
	// status-only mode, where a stale execution of a job restarted by another
	// path is not fenced out. DefaultTable sets "generation".
	GenerationColumn string
	// ProgressColumn (a number) is set to 100 on completion and written by
	// progress heartbeats. The guard never reads it, so it may be nullable.
	// Optional. DefaultTable sets "progress".
	ProgressColumn string
	// TypeColumn (text or enum) names the job type for per-type reclaim
	// limits. NOT NULL: the reclaimer reads it for every running job.
	// Optional. DefaultTable sets "type".
	TypeColumn string
	// ParentIDColumn names the parent (course, video) whose state follows the
	// job's. Nullable: a job may have no parent. Optional. DefaultTable sets
	// "parent_id".
	ParentIDColumn string
	// StartedAtColumn (timestamptz or timestamp) is set by Start to the start
	// of the current attempt, so the reclaimer can read runtime from the table
	// itself. Nullable: a job not yet started has none, and Retry clears it.
	// Optional. DefaultTable sets "started_at".
	StartedAtColumn string
	// OwnerColumn (text or varchar) names the worker process that runs the
	// current execution: Start writes StartGuardConfig.Owner's ID there
	// (package lease's Lease.ID), Retry clears it, and the reclaimer's
	// rescue (reclaim.Config.Workers) sends a PROCESSING job whose owner's
	// lease is no longer live back to QUEUED within the lease's bound
	// rather than the type's limit. Nullable: a job no process claims has
	// none. Optional. DefaultTable sets "lease_id".
	OwnerColumn string

	// Statuses are the four status values. Each defaults to its upper-case
	// English name (QUEUED, PROCESSING, COMPLETED, FAILED).
	Statuses Statuses
}

// Statuses are the values of the status column a guard reads and writes.
type Statuses struct {
	Queued     string // Defaults to "QUEUED".
	Processing string // Defaults to "PROCESSING".
	Completed  string // Defaults to "COMPLETED".
	Failed     string // Defaults to "FAILED".
}

// DefaultTable returns the mapping of the table created by Migration, with
// every optional column present.
func DefaultTable() Table {
	return Table{
		GenerationColumn: GenerationColumnDefault,
		ProgressColumn:   ProgressColumnDefault,
		TypeColumn:       TypeColumnDefault,
		ParentIDColumn:   ParentIDColumnDefault,
		StartedAtColumn:  StartedAtColumnDefault,
		OwnerColumn:      OwnerColumnDefault,
	}.WithDefaults()
}

// QualifiedName returns the quoted name of the table as it appears in SQL.
func (t Table) QualifiedName() string { return ident.Quote(t.Schema, t.Name) }

// WithDefaults returns t with the table's name, its required columns and
// its statuses at their defaults where t leaves them empty. The optional
// columns stay as t has them: empty is absent.
func (t Table) WithDefaults() Table {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&t.Name, TableNameDefault)
	def(&t.IDColumn, IDColumnDefault)
	def(&t.StatusColumn, StatusColumnDefault)
	def(&t.UpdatedAtColumn, UpdatedAtColumnDefault)
	def(&t.FailureReasonColumn, FailureReasonColumnDefault)
	def(&t.Statuses.Queued, StatusQueuedDefault)
	def(&t.Statuses.Processing, StatusProcessingDefault)
	def(&t.Statuses.Completed, StatusCompletedDefault)
	def(&t.Statuses.Failed, StatusFailedDefault)
	return t
}

// column is one configured column: the Table field it came from, its name,
// whether the mapping may leave it out, the types it accepts, and whether it
// must be NOT NULL.
type column struct {
	field    string
	name     string
	optional bool
	accepts  func(typeInfo) bool
	accepted string
	notNull  nullRule
	// def is an optional column's default name, which New looks for when
	// the mapping leaves the column out.
	def string
	// add is how to add the column to a table that lacks it, when the
	// guard fills it itself; nil when only the user knows its values.
	add *addition
}

// addition is a column's type in SQL and in a Prisma schema, for the error
// that says how to add it.
type addition struct{ sql, prisma string }

var (
	addInteger   = &addition{sql: "integer NOT NULL DEFAULT 0", prisma: "Int @default(0)"}
	addTimestamp = &addition{sql: "timestamptz", prisma: "DateTime?"}
	addText      = &addition{sql: "text", prisma: "String?"}
)

// nullRule says whether a column must be NOT NULL and, if so, the value the
// fix gives its NULL rows (and its default), when one can be chosen.
type nullRule struct {
	required bool
	// fill is the SQL value for rows where the column is NULL; nil when only
	// the user can say (an id, a status, a type).
	fill func(typeInfo) string
	// cleared: the guard writes NULL to the column, so it must admit it.
	cleared bool
	// exact: the guard compares the column's values for equality (a lease
	// id), so its collation must be deterministic.
	exact bool
}

var (
	nullable  = nullRule{}
	clearable = nullRule{cleared: true}
	// exactClearable is the owner column's rule: cleared, and compared
	// exactly.
	exactClearable = nullRule{cleared: true, exact: true}
	notNull        = nullRule{required: true}
	notNullZero    = nullRule{required: true, fill: func(typeInfo) string { return "0" }}
	notNullNow     = nullRule{required: true, fill: nowExpr}
)

// columns lists the mapping's columns. The guard reads id, status,
// updated_at, generation and type into non-NULL values, so they must be NOT
// NULL; failure reason, start time and owner are cleared by the guard, so
// they must admit NULL; parent is NULL by design, and progress is only
// written.
func (t Table) columns() []column {
	return []column{
		{"IDColumn", t.IDColumn, false, isIDType, "uuid, text, varchar or an integer", notNull, "", nil},
		{"StatusColumn", t.StatusColumn, false, isLabelType, "text, varchar or an enum", notNull, "", nil},
		{"UpdatedAtColumn", t.UpdatedAtColumn, false, isTimestamp, "timestamptz or timestamp", notNullNow, "", nil},
		{"FailureReasonColumn", t.FailureReasonColumn, false, isText, "text or varchar", clearable, "", nil},
		{"GenerationColumn", t.GenerationColumn, true, isInteger, "an integer", notNullZero, GenerationColumnDefault, addInteger},
		{"ProgressColumn", t.ProgressColumn, true, isNumber, "a number", nullable, ProgressColumnDefault, addInteger},
		{"TypeColumn", t.TypeColumn, true, isLabelType, "text, varchar or an enum", notNull, TypeColumnDefault, nil},
		{"ParentIDColumn", t.ParentIDColumn, true, func(typeInfo) bool { return true }, "any", nullable, ParentIDColumnDefault, nil},
		{"StartedAtColumn", t.StartedAtColumn, true, isTimestamp, "timestamptz or timestamp", clearable, StartedAtColumnDefault, addTimestamp},
		{"OwnerColumn", t.OwnerColumn, true, isOwnerType, "text or varchar", exactClearable, OwnerColumnDefault, addText},
	}
}

// nullableError explains a required column that admits NULL, with the SQL
// that makes it NOT NULL: filling its NULL rows first where a value can be
// chosen, and otherwise leaving that to the user, since an ALTER over NULL
// rows fails.
func nullableError(tbl string, c column, ti typeInfo) error {
	col := ident.Quote(c.name)
	if c.notNull.fill == nil {
		return fmt.Errorf("column %q (%s) of %s admits NULL, but the guard needs a value in every row; "+
			"give the rows where it is NULL a value, then fix it with: "+
			"ALTER TABLE %s ALTER COLUMN %s SET NOT NULL",
			c.name, c.field, tbl, tbl, col)
	}
	v := c.notNull.fill(ti)
	return fmt.Errorf("column %q (%s) of %s admits NULL, but the guard needs a value in every row; "+
		"fix it with: UPDATE %s SET %s = %s WHERE %s IS NULL; "+
		"ALTER TABLE %s ALTER COLUMN %s SET DEFAULT %s, ALTER COLUMN %s SET NOT NULL",
		c.name, c.field, tbl, tbl, col, v, col, tbl, col, v, col)
}

// missingError explains a mapped column the table lacks: for a column the
// guard fills itself, the SQL and the Prisma schema line that add it; for an
// optional one, that the field may be left empty instead.
func missingError(tbl string, c column) error {
	msg := fmt.Sprintf("table %s has no column %q (%s)", tbl, c.name, c.field)
	if c.add != nil {
		msg += fmt.Sprintf("; add it with: ALTER TABLE %s ADD COLUMN %s %s", tbl, ident.Quote(c.name), c.add.sql)
		if prismaField.MatchString(c.name) {
			msg += fmt.Sprintf(" (in a Prisma schema: %s %s)", c.name, c.add.prisma)
		}
	}
	if c.optional {
		sep := "; or"
		if c.add == nil {
			sep = ";"
		}
		msg += fmt.Sprintf("%s leave %s empty if the table has none: the column is optional", sep, c.field)
	}
	return errors.New(msg)
}

// prismaField matches the column names a Prisma schema can use as a
// field's name as they are.
var prismaField = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*$`)

// UnmappedColumn is a column of the table under an optional column's
// default name that the mapping leaves out: the guard neither reads nor
// writes it.
type UnmappedColumn struct {
	// Field is the Table field that would map it: "TypeColumn".
	Field string
	// Column is its name in the table: "type".
	Column string
}

// unmappedCost says what leaving each optional column out costs, for the
// warning of a column the mapping leaves out.
var unmappedCost = map[string]string{
	"GenerationColumn": "without it, a stale execution of a job restarted by another path is not fenced out",
	"ProgressColumn":   "without it, completions and heartbeats write no progress",
	"TypeColumn":       `without it, every job has the type "" and no per-type limit matches`,
	"ParentIDColumn":   "without it, a reclaim's parent rules have no parent to update",
	"StartedAtColumn":  "without it, the table cannot say when an attempt started, and its jobs are never reclaimed from it",
	"OwnerColumn":      "without it, a job whose worker process died waits for its type's limit instead of its worker's lease",
}

// unmapped lists the columns of cat under an optional column's default name
// that t leaves out, when their type is one the field takes: a column of
// another type is some other column of the user's.
func (t Table) unmapped(cat catalog) []UnmappedColumn {
	cols := t.columns()
	mapped := map[string]bool{}
	for _, c := range cols {
		mapped[c.name] = true
	}
	var out []UnmappedColumn
	for _, c := range cols {
		if c.name != "" || c.def == "" || mapped[c.def] {
			continue
		}
		if ti, ok := cat.columns[c.def]; ok && c.accepts(ti) {
			out = append(out, UnmappedColumn{Field: c.field, Column: c.def})
		}
	}
	return out
}

// validate checks the mapping itself, before any database is asked.
func (t Table) validate() error {
	if t.Schema != "" {
		if err := ident.Check("Schema", t.Schema); err != nil {
			return err
		}
	}
	if err := ident.Check("Name", t.Name); err != nil {
		return err
	}
	seen := map[string]string{}
	for _, c := range t.columns() {
		if c.name == "" && c.optional {
			continue
		}
		if err := ident.Check(c.field, c.name); err != nil {
			return err
		}
		if other, dup := seen[c.name]; dup {
			return fmt.Errorf("%s and %s both name column %q", other, c.field, c.name)
		}
		seen[c.name] = c.field
	}
	s := t.Statuses
	labels := []string{s.Queued, s.Processing, s.Completed, s.Failed}
	names := []string{"Queued", "Processing", "Completed", "Failed"}
	for i, l := range labels {
		// The statements write the statuses as literals; text cannot hold
		// a NUL, and the server would cut the statement short at it.
		if strings.IndexByte(l, 0) >= 0 {
			return fmt.Errorf("Statuses.%s %q contains a NUL byte", names[i], l)
		}
		if slices.Contains(labels[:i], l) {
			return fmt.Errorf("Statuses has %q twice; the four statuses must differ", l)
		}
	}
	return nil
}

// typeInfo is what the catalog says of one column.
type typeInfo struct {
	name    string // pg_type.typname
	schema  string // pg_namespace.nspname of the type
	kind    byte   // pg_type.typtype: b base, e enum, d domain, ...
	typeOID int64
	notNull bool // pg_attribute.attnotnull
	// notNullBelow names a partition or inheriting table (at any depth)
	// whose column of the same name is NOT NULL; "" when none is.
	notNullBelow string
	// collation names the column's collation when it is nondeterministic;
	// "" otherwise.
	collation string
	// full is the column's type as format_type writes it, length included:
	// character varying(200).
	full string
	// maxChars is the most characters a varchar(n) or char(n) column
	// holds; 0 when its length is not bounded.
	maxChars int
}

// holds reports whether a value of s stores in the column as it is, not
// refused or cut for its length.
func (t typeInfo) holds(s string) bool {
	return t.maxChars == 0 || utf8.RuneCountInString(s) <= t.maxChars
}

// keeps reports whether s reads back as it was written: a char(n) column
// pads what it stores and drops trailing spaces when read, so a label or
// reason that ends in one would never compare equal to itself again.
func (t typeInfo) keeps(s string) bool {
	return t.name != "bpchar" || strings.TrimRight(s, " ") == s
}

// fitted is the text parameter param as the column stores it: cut to the
// column's length by an explicit cast, which truncates where an assignment
// would refuse the whole write (value too long, SQLSTATE 22001). It is for
// messages, whose head says what matters; param as text when the length is
// not bounded.
func (t typeInfo) fitted(param string) string {
	if t.maxChars == 0 {
		return param + "::text"
	}
	return param + "::text::" + t.full
}

// quoted is the type's name as SQL writes it, schema-qualified, so that a
// cast to it does not depend on the session's search_path.
func (t typeInfo) quoted() string { return ident.Quote(t.schema, t.name) }

func isText(t typeInfo) bool {
	return t.name == "text" || t.name == "varchar" || t.name == "bpchar"
}
func isLabelType(t typeInfo) bool { return isText(t) || t.kind == 'e' }
func isInteger(t typeInfo) bool {
	return t.name == "int2" || t.name == "int4" || t.name == "int8"
}
func isNumber(t typeInfo) bool {
	return isInteger(t) || t.name == "numeric" || t.name == "float4" || t.name == "float8"
}

// isOwnerType: text or varchar; not char(n), which would read a lease id
// that ends in a space back without it.
func isOwnerType(t typeInfo) bool { return t.name == "text" || t.name == "varchar" }
func isTimestamp(t typeInfo) bool { return t.name == "timestamptz" || t.name == "timestamp" }
func isIDType(t typeInfo) bool    { return t.name == "uuid" || isText(t) || isInteger(t) }

// catalog is what New learned of the table from the database.
type catalog struct {
	columns map[string]typeInfo
	// key is the table's schema and name as the catalog holds them,
	// quoted: Guard.TableKey.
	key string
}

// inspectCatalog checks the table against pg_catalog: it exists, every
// configured column exists with a usable type, the columns the guard reads
// into values are NOT NULL, a text id column's collation is deterministic,
// and an enum status column has all four labels. It reads the table's
// schema and name as the catalog holds them, for Guard.TableKey.
// catalogName returns the schema and name of the table that name (SQL,
// quoted as needed) resolves to, as the catalog holds them; pgx.ErrNoRows
// when there is none.
func catalogName(ctx context.Context, db DB, name string) (schema, rel string, err error) {
	err = db.QueryRow(ctx, `SELECT n.nspname::text, c.relname::text FROM pg_catalog.pg_class c`+
		` JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`, name).Scan(&schema, &rel)
	return schema, rel, err
}

func inspectCatalog(ctx context.Context, db DB, t Table) (catalog, error) {
	name := t.QualifiedName()
	schema, rel, err := catalogName(ctx, db, name)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		where := "in search_path"
		if t.Schema != "" {
			where = "in schema " + ident.Quote(t.Schema)
		}
		return catalog{}, fmt.Errorf("table %s does not exist %s (Table.Name %q)%s", name, where, t.Name, nearTables(ctx, db, t))
	case err != nil:
		return catalog{}, fmt.Errorf("look up table %s: %w", name, err)
	}
	cat, err := readColumns(ctx, db, name)
	if err != nil {
		return catalog{}, fmt.Errorf("read columns of %s: %w", name, err)
	}
	cat.key = ident.Quote(schema, rel)
	if err := checkColumns(t, name, cat); err != nil {
		return catalog{}, err
	}
	if id := cat.columns[t.IDColumn]; id.collation != "" {
		// Under a collation that is not deterministic (case-insensitive,
		// say) two spellings of a text id are one row, and nothing keyed
		// outside the table could know it.
		return catalog{}, fmt.Errorf("column %q (IDColumn) of %s has the nondeterministic collation %q: "+
			"two spellings of an id could name one row; give the column a deterministic collation "+
			"(COLLATE \"C\", or the database's default)", t.IDColumn, name, id.collation)
	}
	st := cat.columns[t.StatusColumn]
	for _, l := range []string{t.Statuses.Queued, t.Statuses.Processing, t.Statuses.Completed, t.Statuses.Failed} {
		// Every write sets a status; one the column cannot hold would fail
		// every write that sets it.
		if !st.holds(l) {
			return catalog{}, fmt.Errorf("column %q (StatusColumn) of %s is %s: it cannot hold the status %q (%d characters)",
				t.StatusColumn, name, st.full, l, utf8.RuneCountInString(l))
		}
		if !st.keeps(l) {
			return catalog{}, fmt.Errorf("column %q (StatusColumn) of %s is %s, which drops trailing spaces when read: "+
				"the status %q would never read back as written", t.StatusColumn, name, st.full, l)
		}
	}
	if st.kind == 'e' {
		if err := checkEnumLabels(ctx, db, st, t.Statuses); err != nil {
			return catalog{}, fmt.Errorf("StatusColumn %q: %w", t.StatusColumn, err)
		}
	}
	return cat, nil
}

// checkColumns checks every column t maps against the catalog of the
// table name: it exists, is of a type the field takes, and is NOT NULL
// where the field needs it. The error joins every problem found.
func checkColumns(t Table, name string, cat catalog) error {
	var errs []error
	for _, c := range t.columns() {
		if c.name == "" {
			continue
		}
		ti, ok := cat.columns[c.name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%w%s", missingError(name, c),
				spell.Hint(c.name, slices.Collect(maps.Keys(cat.columns)), "%q")))
		case !c.accepts(ti):
			errs = append(errs, fmt.Errorf("column %q (%s) of %s is %s; want %s", c.name, c.field, name, ti.name, c.accepted))
		case c.notNull.required && !ti.notNull:
			errs = append(errs, nullableError(name, c, ti))
		case c.notNull.cleared && ti.notNull:
			errs = append(errs, fmt.Errorf("column %q (%s) of %s is NOT NULL, but the guard clears it (Retry, a rescue, an orphan's reset, a start without an owner); "+
				"fix it with: ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL", c.name, c.field, name, name, ident.Quote(c.name)))
		case c.notNull.cleared && ti.notNullBelow != "":
			errs = append(errs, fmt.Errorf("column %q (%s) is NOT NULL in %s, a partition or inheriting table of %s, but the guard clears it "+
				"(Retry, a rescue, an orphan's reset, a start without an owner); fix it with: ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL",
				c.name, c.field, ti.notNullBelow, name, ti.notNullBelow, ident.Quote(c.name)))
		case c.notNull.exact && ti.collation != "":
			errs = append(errs, fmt.Errorf("column %q (%s) of %s has the nondeterministic collation %q: two spellings of a lease id "+
				"could name one worker; give the column a deterministic collation (COLLATE \"C\", or the database's default)",
				c.name, c.field, name, ti.collation))
		}
	}
	return errors.Join(errs...)
}

// nearTables is "; did you mean ...?" for the tables t most likely meant,
// in its schema (matched in any letter case) or, without one, in the
// search_path: a name in the wrong case (PostgreSQL folds an unquoted
// CourseJob to coursejob, and the mapping quotes it), quoted as SQL would
// write it, or a letter off. It is "" when none is close, and when the
// catalog cannot be read: the error it adds to says what matters.
func nearTables(ctx context.Context, db DB, t Table) string {
	rows, err := db.Query(ctx, `SELECT n.nspname::text, c.relname::text FROM pg_catalog.pg_class c`+
		` JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')`+
		` AND CASE WHEN $1 = '' THEN n.nspname = ANY (current_schemas(false)) ELSE lower(n.nspname) = lower($1) END`,
		strings.Trim(t.Schema, `"`))
	if err != nil {
		return ""
	}
	schemaOf := map[string]string{}
	var schema, rel string
	if _, err := pgx.ForEachRow(rows, []any{&schema, &rel}, func() error {
		if _, seen := schemaOf[rel]; !seen { // the first schema of the search_path that has it
			schemaOf[rel] = schema
		}
		return nil
	}); err != nil {
		return ""
	}
	near := spell.Suggest(t.Name, slices.Collect(maps.Keys(schemaOf)))
	for i, rel := range near {
		if s := schemaOf[rel]; t.Schema != "" && s != t.Schema {
			near[i] = fmt.Sprintf("Table.Schema %q, Table.Name %q", s, rel)
		} else {
			near[i] = fmt.Sprintf("Table.Name %q", rel)
		}
	}
	return spell.DidYouMean(near, "%s")
}

// readColumns reads what the catalog says of every column of the table
// name.
func readColumns(ctx context.Context, db DB, name string) (catalog, error) {
	rows, err := db.Query(ctx, `
SELECT a.attname, t.typname, n.nspname, t.typtype::text, t.oid::int8, a.attnotnull,
	coalesce((SELECT c.collname::text FROM pg_collation c WHERE c.oid = a.attcollation AND NOT c.collisdeterministic), ''),
	format_type(a.atttypid, a.atttypmod),
	CASE WHEN t.typname IN ('varchar', 'bpchar') AND a.atttypmod >= 4 THEN a.atttypmod - 4 ELSE 0 END,
	coalesce((WITH RECURSIVE below(oid) AS (
			SELECT inhrelid FROM pg_inherits WHERE inhparent = a.attrelid
			UNION SELECT i.inhrelid FROM pg_inherits i JOIN below ON i.inhparent = below.oid)
		SELECT min(b.oid::regclass::text) FROM below b
		JOIN pg_attribute c ON c.attrelid = b.oid AND c.attname = a.attname AND NOT c.attisdropped AND c.attnotnull), '')
FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`, name)
	if err != nil {
		return catalog{}, err
	}
	cat := catalog{columns: map[string]typeInfo{}}
	var col, kind string
	var ti typeInfo
	_, err = pgx.ForEachRow(rows, []any{&col, &ti.name, &ti.schema, &kind, &ti.typeOID, &ti.notNull, &ti.collation, &ti.full, &ti.maxChars, &ti.notNullBelow}, func() error {
		ti.kind = kind[0]
		cat.columns[col] = ti
		return nil
	})
	return cat, err
}

func checkEnumLabels(ctx context.Context, db DB, ti typeInfo, s Statuses) error {
	rows, err := db.Query(ctx, `SELECT enumlabel::text FROM pg_enum WHERE enumtypid = $1::int8::oid`, ti.typeOID)
	if err != nil {
		return fmt.Errorf("read labels of enum %s: %w", ti.name, err)
	}
	labels, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("read labels of enum %s: %w", ti.name, err)
	}
	var missing []string
	for _, want := range []string{s.Queued, s.Processing, s.Completed, s.Failed} {
		if !slices.Contains(labels, want) {
			missing = append(missing, want)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("enum %s has no label %q (it has %q)", ti.name, missing, labels)
	}
	return nil
}
