package jobguard

import (
	"fmt"
	"strings"

	"github.com/jobguard/jobguard/internal/guardlink"
	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/interval"
)

// The statements of package jobset are built here, where the catalog is,
// and handed over through internal/guardlink: they are no part of the
// Guard's API.
func init() {
	guardlink.SetOf = func(guard any) guardlink.SetStatements { return guard.(*Guard).set }
}

// buildSetStatements builds the statements of package jobset (see
// guardlink.SetStatements for what each takes and returns; Fail returns
// the changed rows, then one row counting the rows it locked).
func buildSetStatements(t Table, cat catalog) guardlink.SetStatements {
	q := ident.Quote
	tbl := t.QualifiedName()
	col := func(alias, name string) string { return alias + q(name) }
	var b guardlink.SetStatements
	var ids string // a text array parameter cast to the id column's type
	// Ids travel as text, the form CanonicalID gives them, and the server
	// casts the array: cheaper than parsing every id client-side to send it
	// in binary.
	switch id := cat.columns[t.IDColumn]; {
	case id.name == "uuid":
		ids = "text[]::uuid[]"
	case isInteger(id):
		ids = "text[]::int8[]"
	default:
		ids = "text[]"
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
	// The column list that package jobset scans. The clock is the statement's,
	// statement_timestamp(), which the guarded writes stamp too, read with
	// the rows so that their ages are measured on it (now() would be the
	// start of a caller's transaction, before writes made in it).
	exprs := []string{
		col("t.", t.IDColumn) + "::text", typ, col("t.", t.StatusColumn) + "::text", asUTC("t.", t.UpdatedAtColumn),
		gen, parent, started, col("t.", t.FailureReasonColumn) + "::text", "statement_timestamp()",
	}
	cols := strings.Join(exprs, ", ")

	b.Snapshot = fmt.Sprintf(`SELECT %s FROM %s AS t WHERE %s = ANY($1::%s)`,
		cols, tbl, col("t.", t.IDColumn), ids)
	// The same read, once every transaction that holds one of the rows has
	// ended: a row locked by a write whose outcome is in doubt is read as
	// that write left it, committed or rolled back.
	b.Settled = b.Snapshot + " FOR SHARE OF t SKIP LOCKED"

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
		b.Types = types(t.Statuses.Queued, t.Statuses.Processing)
		b.Finished = types(t.Statuses.Completed, t.Statuses.Failed)
	}

	if t.StartedAtColumn != "" {
		b.Overdue, b.OverdueAfter = buildOverdue(t, cat, exprs, ids)
		b.History = buildHistory(t, cat)
		b.Unstarted = buildUnstarted(t)
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
	b.Orphans = buildOrphans(t, cat, ids, typ)
	failCTEs := fmt.Sprintf(
		`WITH l AS (SELECT e.*, t.ctid AS tid FROM unnest($3::%[1]s, $4::text[], $5::timestamptz[], $6::int8[]) AS e(id, status, updated_at, generation)`+
			` JOIN %[3]s AS t ON t.%[2]s = e.id FOR NO KEY UPDATE OF t SKIP LOCKED),`+
			` u AS (UPDATE %[3]s AS t SET %[4]s = $1, %[5]s = %[12]s, %[6]s = %[7]s FROM l`+
			` WHERE t.ctid = l.tid AND t.%[2]s = l.id AND %[8]s RETURNING t.%[2]s AS id, %[9]s AS generation, %[10]s AS parent, %[11]s AS type)`,
		ids, q(t.IDColumn), tbl, q(t.StatusColumn), q(t.FailureReasonColumn), q(t.UpdatedAtColumn),
		nowExpr(cat.columns[t.UpdatedAtColumn]), match, gen, parent, typ, cat.columns[t.FailureReasonColumn].fitted("$2"))
	const failRows = ` SELECT u.id::text, u.generation, u.parent, u.type FROM u` +
		` UNION ALL SELECT NULL, count(*), NULL, '' FROM l`
	b.Fail = failCTEs + failRows
	// A write alongside is one more CTE: the server runs it to completion
	// whether or not the statement reads it, in the statement's snapshot
	// and transaction, so it commits exactly with the rows it reads.
	b.FailWith = func(write string) string { return failCTEs + `, alongside AS (` + write + `)` + failRows }
	return b
}

// typeLimits is the query of the job types that a statement takes with a
// limit each, $1 the types and $2 their limits in microseconds, as rows
// (type, name, us): type in the type column's own type, name as given, us
// the limit. An enum type is matched through pg_enum, so that a type the
// enum lacks selects nothing instead of failing the cast; a table without
// a type column keeps only the type "". match compares t's type column,
// as "t.", with the type of the relation alias, ending in " AND " ("" for
// a table without a type column). With opaque, the arrays are read
// through subqueries, whose values no plan sees (see buildOverdue).
func typeLimits(t Table, cat catalog, alias string, opaque bool) (types, match string) {
	limits := "unnest($1::text[], $2::int8[]) AS l(type, us)"
	if opaque {
		limits = "unnest((SELECT $1::text[]), (SELECT $2::int8[])) AS l(type, us)"
	}
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
// column list exprs that package jobset scans.
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
	//
	// The arrays of types and limits are read through subqueries. The
	// planner reads the length of an array given as a value, so every
	// custom plan of the statement differs from the generic one, and the
	// server would plan it anew at every run (several times what running
	// it costs, at a page of a few jobs); through a subquery no plan sees
	// the arrays, and after a few runs the server keeps the generic plan,
	// the one the plan tests pin, for the connection's life.
	types, typeMatch := typeLimits(t, cat, "cut", true)
	cut := "SELECT k.type, " + nowExpr(cat.columns[t.StartedAtColumn]) +
		" - " + interval.Param("k.us") + " AS before FROM (" + types + ") AS k"
	started := col("t.", t.StartedAtColumn)
	// Each of the scanned columns gets a name, so that the order can
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

// buildHistory is History's statement: $1 types, $2 their limits (µs, 0
// for none), $3 the window (µs), $4 the rows per type, $5 the percentile,
// $6 the reclaimed reason.
//
// Each type is a LATERAL subquery that reads the latest finished jobs of
// that type by the updated-at column, bare, so an index on (type,
// updated_at) over the finished statuses serves it as one backward range
// ending at LIMIT. The window's bound is computed in the column's own
// convention (a column without time zone holds UTC wall time), and both
// timestamps are read as timestamptz for the runtime, so the session's time
// zone changes nothing. An enum type column is matched through pg_enum, as
// Overdue does (typeLimits), so that a type the enum lacks summarizes
// nothing.
func buildHistory(t Table, cat catalog) string {
	q := ident.Quote
	col := func(name string) string { return "t." + q(name) }
	asTZ := func(name string) string {
		if cat.columns[name].name == "timestamp" {
			return "(" + col(name) + " AT TIME ZONE 'UTC')"
		}
		return col(name)
	}
	now := nowExpr(cat.columns[t.UpdatedAtColumn])
	st := t.Statuses
	completed, failed := ident.Literal(st.Completed), ident.Literal(st.Failed)
	status := col(t.StatusColumn)

	types, typeMatch := typeLimits(t, cat, "k", false)
	reclaimed := fmt.Sprintf("coalesce(starts_with(%s COLLATE \"C\", $6::text), false)", col(t.FailureReasonColumn))
	job := fmt.Sprintf(`SELECT %[1]s = %[2]s AS done, %[1]s = %[3]s AND %[4]s AS reclaimed,`+
		` extract(epoch FROM %[5]s - %[6]s)::float8 AS secs FROM %[7]s AS t`+
		` WHERE %[8]s%[1]s IN (%[2]s, %[3]s) AND %[9]s >= %[10]s - `+interval.Param("$3")+
		` AND %[11]s IS NOT NULL ORDER BY %[9]s DESC LIMIT $4`,
		status, completed, failed, reclaimed, asTZ(t.UpdatedAtColumn), asTZ(t.StartedAtColumn),
		t.QualifiedName(), typeMatch, col(t.UpdatedAtColumn), now, col(t.StartedAtColumn))
	return fmt.Sprintf(`WITH k AS (%s) SELECT k.name,`+
		` count(*) FILTER (WHERE j.done)::int8,`+
		` percentile_cont(ARRAY[0.5, 0.9, 0.99]::float8[]) WITHIN GROUP (ORDER BY j.secs) FILTER (WHERE j.done),`+
		` percentile_cont($5::float8) WITHIN GROUP (ORDER BY j.secs) FILTER (WHERE j.done),`+
		` max(j.secs) FILTER (WHERE j.done),`+
		` count(*) FILTER (WHERE j.done AND k.us > 0 AND j.secs * 1000000 > k.us)::int8,`+
		` count(*) FILTER (WHERE j.reclaimed)::int8,`+
		` count(*) FILTER (WHERE NOT j.done AND NOT j.reclaimed)::int8`+
		` FROM k LEFT JOIN LATERAL (%s) AS j ON true GROUP BY k.name ORDER BY k.name`, types, job)
}

// buildUnstarted is Unstarted's statement. The statuses are literals, as
// the bundled migration's partial index names them, and the type and start
// columns are compared bare, so that index serves every probe: the loose
// scan of the active types (in the type column's own type, so an enum needs
// no cast), one range per type of its rows with a NULL start, and one for
// the rows with no type at all.
func buildUnstarted(t Table) string {
	tbl := t.QualifiedName()
	col := func(name string) string { return "t." + ident.Quote(name) }
	status, started := col(t.StatusColumn), col(t.StartedAtColumn)
	processing := ident.Literal(t.Statuses.Processing)
	unstarted := fmt.Sprintf("%s = %s AND %s IS NULL", status, processing, started)
	if t.TypeColumn == "" {
		return fmt.Sprintf(`SELECT count(*)::int8 FROM %s AS t WHERE %s`, tbl, unstarted)
	}
	active := fmt.Sprintf("%s IN (%s, %s)", status, ident.Literal(t.Statuses.Queued), processing)
	typ := col(t.TypeColumn)
	return fmt.Sprintf(`WITH RECURSIVE k(type) AS (`+
		`(SELECT %[1]s FROM %[2]s AS t WHERE %[3]s AND %[1]s IS NOT NULL ORDER BY %[1]s LIMIT 1)`+
		` UNION ALL SELECT (SELECT %[1]s FROM %[2]s AS t WHERE %[3]s AND %[1]s > k.type ORDER BY %[1]s LIMIT 1)`+
		` FROM k WHERE k.type IS NOT NULL)`+
		` SELECT ((SELECT count(*) FROM %[2]s AS t WHERE %[1]s IS NULL AND %[4]s)`+
		` + coalesce((SELECT sum(c.n) FROM k CROSS JOIN LATERAL`+
		` (SELECT count(*) AS n FROM %[2]s AS t WHERE %[1]s = k.type AND %[4]s) AS c WHERE k.type IS NOT NULL), 0))::int8`,
		typ, tbl, active, unstarted)
}
