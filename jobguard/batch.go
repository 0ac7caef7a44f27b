package jobguard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/interval"
	"github.com/jobguard/jobguard/internal/pgarray"
	"github.com/jobguard/jobguard/internal/pgvalue"
)

// JobState is a job's row as the batch operations read and write it: the
// state a reclaimer decides on, and the state its conditional write is
// matched against.
type JobState struct {
	// ID is the id column as text (uuids in their canonical lower-case form).
	ID string
	// Type is the type column as text; "" when the table has none or the row
	// has no type.
	Type string
	// Status is the status column as text.
	Status string
	// UpdatedAt is the progress signal. A timestamp column without time zone
	// is read as UTC wall time, the way the guard writes it.
	UpdatedAt time.Time
	// Generation is the fencing token; 0 when the table has none.
	Generation int64
	// ParentID is the parent id column as text; "" when the table has none or
	// the row has no parent.
	ParentID string
	// StartedAt is the start of the current attempt; the zero time when the
	// table has no started-at column or the row has no start time.
	StartedAt time.Time
	// ReadAt is the database's clock when the row was read. UpdatedAt and
	// StartedAt are stamped by the database, so how long ago they were is
	// ReadAt minus them: a reader whose own clock runs ahead or behind would
	// see progress that is not there, or miss progress that is.
	ReadAt time.Time
	// FailureReason is the failure reason column as text; "" when it is
	// NULL. It tells a reclaim's FAILED from the execution's own Fail, which
	// both leave the generation as it was.
	FailureReason string
}

// Batch is the guard's set-oriented side: reading the rows of many jobs in
// one query (Snapshot, Overdue, ActiveTypes) and failing, in one statement,
// those still exactly as read (FailIfUnchanged). It is what services built
// on the guard use, the reclaimer and the watcher; an application
// completes, fails and touches one job at a time through the Guard's own
// methods. Get it with Guard.Batch.
type Batch struct{ g *Guard }

// Batch returns the guard's set-oriented operations.
func (g *Guard) Batch() *Batch { return g.set }

// batchStatements are the set-oriented statements of the reclaimer, built
// once by New from the validated mapping.
type batchStatements struct {
	ids          string // a text array parameter cast to the id column's type
	snapshot     string // $1 ids → rows
	types        string // → the distinct types of the active jobs; "" without a type column
	finished     string // → the distinct types of the finished jobs; "" without a type column
	overdue      string // $1 types, $2 limits (µs), $3 page size → rows
	overdueAfter string // overdue's parameters, $4 the last id of the previous page (text) → rows
	history      string // see buildHistory
	unstarted    string // see buildUnstarted
	fail         string // $1 failed, $2 reason, $3 ids, $4 statuses, $5 updated_at, $6 generations → changed rows, then the count locked
}

func buildBatchStatements(t Table, cat catalog) batchStatements {
	q := ident.Quote
	tbl := t.QualifiedName()
	col := func(alias, name string) string { return alias + q(name) }
	var b batchStatements
	// Ids travel as text, the form CanonicalID gives them, and the server
	// casts the array: cheaper than parsing every id client-side to send it
	// in binary.
	switch id := cat.columns[t.IDColumn]; {
	case id.name == "uuid":
		b.ids = "text[]::uuid[]"
	case isInteger(id):
		b.ids = "text[]::int8[]"
	default:
		b.ids = "text[]"
	}
	isPlain := func(name string) bool { return cat.columns[name].name == "timestamp" }
	// asUTC reads a timestamp column as a timestamptz: a column without time
	// zone holds UTC wall time.
	asUTC := func(alias, name string) string {
		if isPlain(name) {
			return "(" + col(alias, name) + " AT TIME ZONE 'UTC')"
		}
		return col(alias, name)
	}
	typ := "''::text"
	if t.TypeColumn != "" {
		typ = "coalesce(" + col("t.", t.TypeColumn) + "::text, '')"
	}
	gen, parent, started := "0::int8", "NULL::text", "NULL::timestamptz"
	if t.GenerationColumn != "" {
		gen = col("t.", t.GenerationColumn) + "::int8"
	}
	if t.ParentIDColumn != "" {
		parent = col("t.", t.ParentIDColumn) + "::text"
	}
	if t.StartedAtColumn != "" {
		started = asUTC("t.", t.StartedAtColumn)
	}
	// The column list of scanJobStates. The clock is the statement's,
	// statement_timestamp(), which the guarded writes stamp too, read with
	// the rows so that their ages are measured on it (now() would be the
	// start of a caller's transaction, before writes made in it).
	exprs := []string{
		col("t.", t.IDColumn) + "::text", typ, col("t.", t.StatusColumn) + "::text", asUTC("t.", t.UpdatedAtColumn),
		gen, parent, started, col("t.", t.FailureReasonColumn) + "::text", "statement_timestamp()",
	}
	cols := strings.Join(exprs, ", ")

	b.snapshot = fmt.Sprintf(`SELECT %s FROM %s AS t WHERE %s = ANY($1::%s)`,
		cols, tbl, col("t.", t.IDColumn), b.ids)

	if t.TypeColumn != "" {
		// The distinct types of the jobs in two statuses, one index probe
		// per type (a loose scan): the statuses are written as the bundled
		// migration's partial indexes name them (the active jobs', the
		// finished jobs'), so the probes read that index alone.
		typeCol := col("t.", t.TypeColumn)
		types := func(a, b string) string {
			in := fmt.Sprintf("%s IN (%s, %s)", col("t.", t.StatusColumn), ident.Literal(a), ident.Literal(b))
			return fmt.Sprintf(`WITH RECURSIVE k(type) AS (`+
				`(SELECT %[1]s FROM %[2]s AS t WHERE %[3]s AND %[1]s IS NOT NULL ORDER BY %[1]s LIMIT 1)`+
				` UNION ALL SELECT (SELECT %[1]s FROM %[2]s AS t WHERE %[3]s AND %[1]s > k.type ORDER BY %[1]s LIMIT 1)`+
				` FROM k WHERE k.type IS NOT NULL) SELECT type::text FROM k WHERE type IS NOT NULL`,
				typeCol, tbl, in)
		}
		b.types = types(t.Statuses.Queued, t.Statuses.Processing)
		b.finished = types(t.Statuses.Completed, t.Statuses.Failed)
	}

	if t.StartedAtColumn != "" {
		b.overdue, b.overdueAfter = buildOverdue(t, cat, exprs, b.ids)
		b.history = buildHistory(t, cat)
		b.unstarted = buildUnstarted(t)
	}

	// The write locks the rows it may change first, skipping any row another
	// transaction holds: a held row is being written, which is progress, and
	// waiting for it would stall every other reclaim. As it never waits, two
	// reclaimers cannot deadlock on each other's rows, whatever the order.
	// The lock is the one the UPDATE itself takes, so a transaction that only
	// references the row (a foreign key) is not in the way. The UPDATE finds
	// each locked row by its ctid, without a second index probe; a row that
	// another transaction changed and committed after this statement began
	// is locked in its new version, which the statement cannot see, so it is
	// left alone like any row that moved. The rows it changed come back, and
	// one more row counts the rows it locked.
	//
	// Each join goes through the primary key or the ctid, never one list
	// against another, so even a generic plan, which knows nothing of the
	// arrays' sizes, stays linear in the rows.
	match := fmt.Sprintf("t.%s::text = l.status AND t.%s = l.updated_at", q(t.StatusColumn), q(t.UpdatedAtColumn))
	if isPlain(t.UpdatedAtColumn) {
		match = fmt.Sprintf("t.%s::text = l.status AND t.%s = (l.updated_at AT TIME ZONE 'UTC')", q(t.StatusColumn), q(t.UpdatedAtColumn))
	}
	if t.GenerationColumn != "" {
		match += fmt.Sprintf(" AND t.%s = l.generation", q(t.GenerationColumn))
	}
	b.fail = fmt.Sprintf(
		`WITH l AS (SELECT e.*, t.ctid AS tid FROM unnest($3::%[1]s, $4::text[], $5::timestamptz[], $6::int8[]) AS e(id, status, updated_at, generation)`+
			` JOIN %[3]s AS t ON t.%[2]s = e.id FOR NO KEY UPDATE OF t SKIP LOCKED),`+
			` u AS (UPDATE %[3]s AS t SET %[4]s = $1, %[5]s = %[12]s, %[6]s = %[7]s FROM l`+
			` WHERE t.ctid = l.tid AND t.%[2]s = l.id AND %[8]s RETURNING t.%[2]s AS id, %[9]s AS generation, %[10]s AS parent, %[11]s AS type)`+
			` SELECT u.id::text, u.generation, u.parent, u.type FROM u`+
			` UNION ALL SELECT NULL, count(*), NULL, '' FROM l`,
		b.ids, q(t.IDColumn), tbl, q(t.StatusColumn), q(t.FailureReasonColumn), q(t.UpdatedAtColumn),
		nowExpr(cat.columns[t.UpdatedAtColumn]), match, gen, parent, typ, cat.columns[t.FailureReasonColumn].fitted("$2"))
	return b
}

// scanJobStates reads rows of the batch statements' column list.
func scanJobStates(rows pgx.Rows) ([]JobState, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (JobState, error) {
		var s JobState
		var parent, reason *string
		var started *time.Time
		err := r.Scan(&s.ID, &s.Type, &s.Status, &s.UpdatedAt, &s.Generation, &parent, &started, &reason, &s.ReadAt)
		if parent != nil {
			s.ParentID = *parent
		}
		if reason != nil {
			s.FailureReason = *reason
		}
		if started != nil {
			s.StartedAt = *started
		}
		return s, err
	})
}

// CanonicalID returns jobID as the id column prints it: a uuid in lower case
// with dashes, an integer in decimal without a plus sign, leading zeros or
// white space, a char(n) value without its trailing spaces, text and
// varchar as given. It reads every spelling that PostgreSQL's input
// function for the column's type reads (and a uuid's URN form); see the
// package doc, "One job, one id". Every entry point of the library names
// a job this way in what it returns and in every key it writes or
// compares (executions, errors, markers, notices, heartbeat slots, the
// side tables' rows, reclaim reports), so that one job spelled two ways
// is still one job. An id that cannot be a value of the column returns an
// error wrapping ErrInvalidJobID.
//
// An id already in its canonical form comes back as it is, without
// allocating, so a hot path (a heartbeat) can key by it at no cost.
func (g *Guard) CanonicalID(jobID string) (string, error) {
	if g.idKind == idUUID && isLowerUUID(jobID) {
		return jobID, nil
	}
	v, err := g.idArg(jobID)
	if err != nil {
		return "", err
	}
	if n, ok := v.(int64); ok && jobID == strconv.FormatInt(n, 10) {
		return jobID, nil
	}
	return canonicalID(v), nil
}

// isLowerUUID reports whether s is a uuid as PostgreSQL prints one: lower
// case hex in the 8-4-4-4-12 form.
func isLowerUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// Snapshot reads the rows of ids in one query and returns them keyed by the
// id as given. Ids with no row, and ids that cannot be values of the id
// column (not a uuid, not an integer), are absent from the map.
func (b *Batch) Snapshot(ctx context.Context, db DB, ids []string) (map[string]JobState, error) {
	g := b.g
	given := make(map[string][]string, len(ids)) // canonical id → ids as given
	norm := make([]string, 0, len(ids))
	for _, id := range ids {
		n, err := g.CanonicalID(id)
		if err != nil {
			continue
		}
		if _, seen := given[n]; !seen {
			norm = append(norm, n)
		}
		given[n] = append(given[n], id)
	}
	out := make(map[string]JobState, len(norm))
	if len(norm) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, g.batch.snapshot, pgarray.Of(norm))
	if err != nil {
		return nil, fmt.Errorf("jobguard: snapshot: %w", err)
	}
	states, err := scanJobStates(rows)
	if err != nil {
		return nil, fmt.Errorf("jobguard: snapshot: %w", err)
	}
	for _, s := range states {
		for _, id := range given[s.ID] {
			out[id] = s
		}
	}
	return out, nil
}

// ActiveTypes returns the distinct types of the QUEUED and PROCESSING
// jobs, in one statement that probes an index on the type column once per
// type (the bundled migration's partial index on the active jobs) rather
// than reading the jobs. A table without a type column has one type, "".
func (b *Batch) ActiveTypes(ctx context.Context, db DB) ([]string, error) {
	types, err := b.distinctTypes(ctx, db, b.g.batch.types)
	if err != nil {
		return nil, fmt.Errorf("jobguard: active types: %w", err)
	}
	return types, nil
}

// FinishedTypes returns the distinct types of the COMPLETED and FAILED
// jobs, as ActiveTypes does for the active ones: one probe per type of an
// index on the type column over the finished statuses (the bundled
// migration's jobs_finished_idx). A table without a type column has one
// type, "".
func (b *Batch) FinishedTypes(ctx context.Context, db DB) ([]string, error) {
	types, err := b.distinctTypes(ctx, db, b.g.batch.finished)
	if err != nil {
		return nil, fmt.Errorf("jobguard: finished types: %w", err)
	}
	return types, nil
}

// distinctTypes runs one of the loose scans of the types; "" is a table
// without a type column: one type, no round trip.
func (b *Batch) distinctTypes(ctx context.Context, db DB, sql string) ([]string, error) {
	if sql == "" {
		return []string{""}, nil
	}
	rows, err := db.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// OverdueQuery selects the jobs of Overdue.
type OverdueQuery struct {
	// Limits is the longest the current attempt of each job type may run.
	// Jobs of a type absent from it are left out. On a table without a type
	// column, the limit of "" applies to every job.
	Limits map[string]time.Duration
	// After continues a listing: only jobs whose id sorts after it, in the
	// id column's order. Pass the ID of the last job of the previous page.
	// Defaults to "", the first page.
	After string
	// Max is the most jobs returned. Required.
	Max int
}

// ErrNoStartedAt is returned by Overdue for a table without a
// StartedAtColumn: runtime cannot be read from the table itself.
var ErrNoStartedAt = errors.New("jobguard: table has no StartedAtColumn")

// Overdue returns, in one query, up to q.Max PROCESSING jobs whose current
// attempt (the started-at column, stamped by Start) has run longer than
// their type's limit, on the database's clock, ordered by id. It
// reads only those rows, one index range per type: the status is a literal
// and the type and start columns are compared bare, so an index on (type,
// started_at) over the active statuses (the bundled migration's) does the
// filtering, and the plan stays the same under a prepared statement's
// generic plan. Rows with no start time are never returned.
func (b *Batch) Overdue(ctx context.Context, db DB, q OverdueQuery) ([]JobState, error) {
	g := b.g
	if g.batch.overdue == "" {
		return nil, fmt.Errorf("jobguard: overdue: %w", ErrNoStartedAt)
	}
	if q.Max <= 0 {
		return nil, fmt.Errorf("jobguard: overdue: Max %d is not positive", q.Max)
	}
	types := make([]string, 0, len(q.Limits))
	limits := make([]int64, 0, len(q.Limits))
	for typ, d := range q.Limits {
		types = append(types, typ)
		limits = append(limits, interval.Micros(d))
	}
	args := []any{pgarray.Of(types), pgarray.Of(limits), q.Max}
	sql := g.batch.overdue
	if q.After != "" {
		// Checked here: the server casts it to the id column's type, and a
		// failed cast would abort a caller's transaction.
		after, err := g.CanonicalID(q.After)
		if err != nil {
			return nil, fmt.Errorf("jobguard: overdue: After: %w", err)
		}
		sql = g.batch.overdueAfter
		args = append(args, after)
	}
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("jobguard: overdue: %w", err)
	}
	states, err := scanJobStates(rows)
	if err != nil {
		return nil, fmt.Errorf("jobguard: overdue: %w", err)
	}
	return states, nil
}

// FailResult is what FailIfUnchanged did with the jobs it was given.
type FailResult struct {
	// Failed are the jobs the call failed, with ID, Type, ParentID and
	// Generation as written and Status the failed status.
	Failed []JobState
	// Moved counts jobs whose row no longer matched what was read (progress,
	// a completion, a new start): left alone.
	Moved int
	// Locked counts jobs whose row another transaction held (or that was
	// deleted meanwhile): skipped without waiting.
	Locked int
}

// FailIfUnchanged writes FAILED with reason to every job of expected whose
// row still has exactly the status, updated_at and (on a fenced table)
// generation that expected records, in one conditional statement. A job
// whose row moved in between is left alone (counted in Moved). A row that
// another transaction holds is skipped, never waited for (Locked): a transaction
// holding a job's row is writing it, which is progress, and one idle worker
// transaction must not stall the reclaim of every other job.
//
// The comparison of updated_at is exact, also for a timestamp column without
// time zone (read as UTC wall time). Pass states read by Snapshot or
// Overdue. Give it a pgx.Tx to make the follow-up writes (parents) part of
// the same transaction.
func (b *Batch) FailIfUnchanged(ctx context.Context, db DB, expected []JobState, reason string) (FailResult, error) {
	g := b.g
	byID := make(map[string]JobState, len(expected))
	for _, e := range expected {
		n, err := g.CanonicalID(e.ID)
		if err != nil {
			return FailResult{}, fmt.Errorf("jobguard: fail unchanged: %w", err)
		}
		e.ID = n
		byID[n] = e
	}
	if len(byID) == 0 {
		return FailResult{}, nil
	}
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	statuses := make([]string, len(ids))
	updated := make([]time.Time, len(ids))
	gens := make([]int64, len(ids))
	for i, id := range ids {
		e := byID[id]
		statuses[i], updated[i], gens[i] = e.Status, e.UpdatedAt.UTC(), e.Generation
	}
	rows, err := db.Query(ctx, g.batch.fail, g.table.Statuses.Failed, pgvalue.StorableText(reason),
		pgarray.Of(ids), pgarray.Of(statuses), pgarray.Of(updated), pgarray.Of(gens))
	if err != nil {
		return FailResult{}, fmt.Errorf("jobguard: fail unchanged: %w", err)
	}
	var res FailResult
	var id *string
	var typ string
	var gen int64
	var parent *string
	locked := 0
	_, err = pgx.ForEachRow(rows, []any{&id, &gen, &parent, &typ}, func() error {
		if id == nil { // the count of the rows locked
			locked = int(gen)
			return nil
		}
		s := JobState{ID: *id, Type: typ, Status: g.table.Statuses.Failed, Generation: gen}
		if parent != nil {
			s.ParentID = *parent
		}
		res.Failed = append(res.Failed, s)
		return nil
	})
	if err != nil {
		return FailResult{}, fmt.Errorf("jobguard: fail unchanged: %w", err)
	}
	res.Moved = locked - len(res.Failed)
	res.Locked = len(ids) - locked
	return res, nil
}

// typeLimits is the query of the job types that a statement takes with a
// limit each, $1 the types and $2 their limits in microseconds, as rows
// (type, name, us): type in the type column's own type, name as given, us
// the limit. An enum type is matched through pg_enum, so that a type the
// enum lacks selects nothing instead of failing the cast; a table without
// a type column keeps only the type "". match compares t's type column,
// as "t.", with the type of the relation alias, ending in " AND " ("" for
// a table without a type column).
func typeLimits(t Table, cat catalog, alias string) (types, match string) {
	limits := "unnest($1::text[], $2::int8[]) AS l(type, us)"
	if t.TypeColumn == "" {
		return "SELECT l.type, l.type AS name, l.us FROM " + limits + " WHERE l.type = ''", ""
	}
	match = "t." + ident.Quote(t.TypeColumn) + " = " + alias + ".type AND "
	if ti := cat.columns[t.TypeColumn]; ti.kind == 'e' {
		return fmt.Sprintf("SELECT e.enumlabel::text::%s AS type, l.type AS name, l.us FROM %s"+
			" JOIN pg_catalog.pg_enum AS e ON e.enumtypid = %d AND e.enumlabel = l.type",
			ti.quoted(), limits, ti.typeOID), match
	}
	return "SELECT l.type, l.type AS name, l.us FROM " + limits, match
}

// buildOverdue builds Overdue's statements, first page and next, over the
// column list exprs of scanJobStates.
func buildOverdue(t Table, cat catalog, exprs []string, ids string) (first, next string) {
	tbl := t.QualifiedName()
	col := func(alias, name string) string { return alias + ident.Quote(name) }
	// Only the jobs over their type's limit, on the database's clock: one
	// index range per type, whatever the number of running jobs. The
	// status is a literal so that the planner can use a partial index on
	// the active statuses, and the type and start columns are compared
	// bare so that an index on them applies. An enum type is matched
	// through pg_enum, so that a limit naming a label the enum lacks
	// selects nothing instead of failing the cast.
	//
	// The lower bound '-infinity' changes no result; it makes the start
	// condition a range, which the planner estimates at a fraction of the
	// rows rather than a third of them. The cutoff is unknown until the
	// statement runs, and with a third of every type's rows estimated, a
	// server with JIT compiles the statement on every run, at a cost of
	// tens of milliseconds.
	types, typeMatch := typeLimits(t, cat, "cut")
	cut := "SELECT k.type, " + nowExpr(cat.columns[t.StartedAtColumn]) +
		" - " + interval.Param("k.us") + " AS before FROM (" + types + ") AS k"
	started := col("t.", t.StartedAtColumn)
	// Each of scanJobStates' columns gets a name, so that the order can
	// be by the id in the column's own type (cheaper to sort than text)
	// without returning it twice.
	inner, outer := make([]string, len(exprs)), make([]string, len(exprs))
	for i, e := range exprs {
		inner[i] = fmt.Sprintf("%s AS c%d", e, i)
		outer[i] = fmt.Sprintf("c.c%d", i)
	}
	idCast := strings.TrimPrefix(ids, "text[]")
	idCast = strings.TrimSuffix(idCast, "[]")
	overdue := func(after string) string {
		// OFFSET 0 keeps each type's range a scan of its own, and the
		// order by a subquery's output cannot be read off an index: LIMIT
		// sorts the overdue rows only, never walks the table in id order.
		return fmt.Sprintf(`WITH cut AS (%s) SELECT %s FROM cut CROSS JOIN LATERAL (SELECT %s AS k, %s FROM %s AS t`+
			` WHERE %s = %s AND %s%s > '-infinity' AND %s < cut.before%s OFFSET 0) AS c ORDER BY c.k LIMIT $3`,
			cut, strings.Join(outer, ", "), col("t.", t.IDColumn), strings.Join(inner, ", "), tbl,
			col("t.", t.StatusColumn), ident.Literal(t.Statuses.Processing),
			typeMatch, started, started, after)
	}
	return overdue(""), overdue(fmt.Sprintf(" AND %s > $4::text%s", col("t.", t.IDColumn), idCast))
}
