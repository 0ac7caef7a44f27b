package jobguard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/ident"
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

// batchStatements are the set-oriented statements of the reclaimer, built
// once by New from the validated mapping.
type batchStatements struct {
	ids          string // the id column's type as an array parameter: uuid[], int8[] or text[]
	snapshot     string // $1 ids → rows
	overdue      string // $1 types, $2 limits (µs), $3 otherwise (µs, NULL: none), $4 page size → rows
	overdueAfter string // overdue's parameters, $5 the last id of the previous page → rows
	fail         string // $1 failed, $2 reason, $3 ids, $4 statuses, $5 updated_at, $6 generations → locked rows
}

func buildBatchStatements(t Table, cat catalog) batchStatements {
	q := ident.Quote
	tbl := t.QualifiedName()
	col := func(alias, name string) string { return alias + q(name) }
	var b batchStatements
	switch id := cat.columns[t.IDColumn]; {
	case id.name == "uuid":
		b.ids = "uuid[]"
	case isInteger(id):
		b.ids = "int8[]"
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
	// The column list of scanJobStates; now() is the statement's clock,
	// read with the rows so that their ages are measured on it.
	cols := fmt.Sprintf("%s::text, %s, %s::text, %s, %s, %s, %s, %s::text, now()",
		col("t.", t.IDColumn), typ, col("t.", t.StatusColumn), asUTC("t.", t.UpdatedAtColumn), gen, parent, started,
		col("t.", t.FailureReasonColumn))

	b.snapshot = fmt.Sprintf(`SELECT %s FROM %s AS t WHERE %s = ANY($1::%s)`,
		cols, tbl, col("t.", t.IDColumn), b.ids)

	if t.StartedAtColumn != "" {
		// Only the jobs over their type's limit, on the database's clock. The
		// status is a literal so that the planner can use a partial index on
		// the active statuses, and the start column is compared bare so that
		// an index on it applies. A type column of text is joined bare for the
		// same reason; an enum is compared as text, since a limit may name a
		// type the enum lacks.
		joinType := "''"
		if t.TypeColumn != "" {
			joinType = col("t.", t.TypeColumn)
			if !isText(cat.columns[t.TypeColumn]) {
				joinType += "::text"
			}
		}
		now := "now()"
		if isPlain(t.StartedAtColumn) {
			now = "(now() AT TIME ZONE 'UTC')"
		}
		// MATERIALIZED keeps the planner from walking the primary key in id
		// order to satisfy LIMIT, which would visit every row of the table.
		overdue := func(after string) string {
			return fmt.Sprintf(`WITH c AS MATERIALIZED (SELECT %s FROM %s AS t`+
				` LEFT JOIN unnest($1::text[], $2::int8[]) AS l(type, us) ON l.type = %s`+
				` WHERE %s = %s AND %s < %s - coalesce(l.us, $3::int8) * interval '1 microsecond'%s)`+
				` SELECT * FROM c ORDER BY 1 LIMIT $4`,
				cols, tbl, joinType,
				col("t.", t.StatusColumn), ident.Literal(t.Statuses.Processing),
				col("t.", t.StartedAtColumn), now, after)
		}
		b.overdue = overdue("")
		// Ordered by the id as text, which is the column's own order only for
		// text ids: the keyset compares in the same order it sorts.
		b.overdueAfter = overdue(fmt.Sprintf(" AND %s::text > $5", col("t.", t.IDColumn)))
	}

	// The write locks the rows it may change first, skipping any row another
	// transaction holds: a held row is being written, which is progress, and
	// waiting for it would stall every other reclaim. In id order, so two
	// reclaimers lock in the same order. Every row it locked comes back,
	// with whether the conditional write changed it.
	match := fmt.Sprintf("t.%s::text = e.status AND t.%s = e.updated_at", q(t.StatusColumn), q(t.UpdatedAtColumn))
	if isPlain(t.UpdatedAtColumn) {
		match = fmt.Sprintf("t.%s::text = e.status AND t.%s = (e.updated_at AT TIME ZONE 'UTC')", q(t.StatusColumn), q(t.UpdatedAtColumn))
	}
	if t.GenerationColumn != "" {
		match += fmt.Sprintf(" AND t.%s = e.generation", q(t.GenerationColumn))
	}
	b.fail = fmt.Sprintf(
		`WITH e AS (SELECT * FROM unnest($3::%[1]s, $4::text[], $5::timestamptz[], $6::int8[]) AS e(id, status, updated_at, generation)),`+
			` l AS (SELECT t.%[2]s AS id FROM %[3]s AS t WHERE t.%[2]s = ANY($3::%[1]s) ORDER BY t.%[2]s FOR UPDATE SKIP LOCKED),`+
			` u AS (UPDATE %[3]s AS t SET %[4]s = $1, %[5]s = $2, %[6]s = %[7]s FROM e`+
			` WHERE t.%[2]s = e.id AND t.%[2]s IN (SELECT id FROM l) AND %[8]s RETURNING t.%[2]s AS id, %[9]s AS generation, %[10]s AS parent, %[11]s AS type)`+
			` SELECT l.id::text, u.id IS NOT NULL, coalesce(u.generation, 0), u.parent, coalesce(u.type, '') FROM l LEFT JOIN u ON u.id = l.id`,
		b.ids, q(t.IDColumn), tbl, q(t.StatusColumn), q(t.FailureReasonColumn), q(t.UpdatedAtColumn),
		nowExpr(cat.columns[t.UpdatedAtColumn]), match, gen, parent, typ)
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
// with dashes, an integer in decimal without sign or leading zeros, text as
// given. Markers, notices, heartbeat slots and reclaim reports all name a
// job this way, so that one job spelled two ways is still one job. An id
// that cannot be a value of the column returns an error wrapping
// ErrInvalidJobID.
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
func (g *Guard) Snapshot(ctx context.Context, db DB, ids []string) (map[string]JobState, error) {
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
	rows, err := db.Query(ctx, g.batch.snapshot, norm)
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

// OverdueQuery selects the jobs of Overdue.
type OverdueQuery struct {
	// Limits is the longest the current attempt of each job type may run.
	Limits map[string]time.Duration
	// Otherwise applies to a job whose type is absent from Limits. Defaults
	// to 0, which leaves such jobs out.
	Otherwise time.Duration
	// After continues a listing: only jobs whose id, as text, sorts after it.
	// Pass the ID of the last job of the previous page. Defaults to "", the
	// first page.
	After string
	// Max is the most jobs returned. Required.
	Max int
}

// ErrNoStartedAt is returned by Overdue for a table without a
// StartedAtColumn: runtime cannot be read from the table itself.
var ErrNoStartedAt = errors.New("jobguard: table has no StartedAtColumn")

// Overdue returns, in one query, up to q.Max PROCESSING jobs whose current
// attempt (the started-at column, stamped by Start) has run longer than
// their type's limit, on the database's clock, ordered by id as text. It
// reads only those rows: the status is compared as a literal and the start
// column bare, so a partial index on the active statuses and the start time
// (the bundled migration's) does the filtering. Rows with no start time are
// never returned.
func (g *Guard) Overdue(ctx context.Context, db DB, q OverdueQuery) ([]JobState, error) {
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
		limits = append(limits, d.Microseconds())
	}
	var otherwise *int64
	if q.Otherwise > 0 {
		us := q.Otherwise.Microseconds()
		otherwise = &us
	}
	args := []any{types, limits, otherwise, q.Max}
	sql := g.batch.overdue
	if q.After != "" {
		sql = g.batch.overdueAfter
		args = append(args, q.After)
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

// FailResult is what FailIfUnchanged did with each job it was given.
type FailResult struct {
	// Failed are the jobs the call failed, with ID, Type, ParentID and
	// Generation as written and Status the failed status.
	Failed []JobState
	// Moved are the ids of jobs whose row no longer matched what was read
	// (progress, a completion, a new start): left alone.
	Moved []string
	// Locked are the ids of jobs whose row another transaction held (or that
	// was deleted meanwhile): skipped without waiting.
	Locked []string
}

// FailIfUnchanged writes FAILED with reason to every job of expected whose
// row still has exactly the status, updated_at and (on a fenced table)
// generation that expected records, in one conditional statement. A job
// whose row moved in between is left alone (Moved). A row that another
// transaction holds is skipped, never waited for (Locked): a transaction
// holding a job's row is writing it, which is progress, and one idle worker
// transaction must not stall the reclaim of every other job.
//
// The comparison of updated_at is exact, also for a timestamp column without
// time zone (read as UTC wall time). Pass states read by Snapshot or
// Overdue. Give it a pgx.Tx to make the follow-up writes (parents) part of
// the same transaction.
func (g *Guard) FailIfUnchanged(ctx context.Context, db DB, expected []JobState, reason string) (FailResult, error) {
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
	slices.Sort(ids)
	statuses := make([]string, len(ids))
	updated := make([]time.Time, len(ids))
	gens := make([]int64, len(ids))
	for i, id := range ids {
		e := byID[id]
		statuses[i], updated[i], gens[i] = e.Status, e.UpdatedAt.UTC(), e.Generation
	}
	var idArgs any = ids
	if g.idKind == idInt {
		// Canonical integer ids parse; the array is sent as int8[].
		n := make([]int64, len(ids))
		for i, id := range ids {
			v, _ := g.idArg(id)
			n[i] = v.(int64)
		}
		idArgs = n
	}
	rows, err := db.Query(ctx, g.batch.fail, g.table.Statuses.Failed, reason, idArgs, statuses, updated, gens)
	if err != nil {
		return FailResult{}, fmt.Errorf("jobguard: fail unchanged: %w", err)
	}
	var res FailResult
	locked := make(map[string]bool, len(ids))
	var id, typ string
	var changed bool
	var gen int64
	var parent *string
	_, err = pgx.ForEachRow(rows, []any{&id, &changed, &gen, &parent, &typ}, func() error {
		locked[id] = true
		if !changed {
			res.Moved = append(res.Moved, id)
			return nil
		}
		s := JobState{ID: id, Type: typ, Status: g.table.Statuses.Failed, Generation: gen}
		if parent != nil {
			s.ParentID = *parent
		}
		res.Failed = append(res.Failed, s)
		return nil
	})
	if err != nil {
		return FailResult{}, fmt.Errorf("jobguard: fail unchanged: %w", err)
	}
	for _, id := range ids {
		if !locked[id] {
			res.Locked = append(res.Locked, id)
		}
	}
	return res, nil
}
