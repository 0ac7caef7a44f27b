package jobguard

import (
	"context"
	"fmt"
	"slices"
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
	// Type is the type column as text; "" when the table has none.
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
	// FailureReason is the failure reason column as text; "" when it is
	// NULL. It tells a reclaim's FAILED from the execution's own Fail, which
	// both leave the generation as it was.
	FailureReason string
}

// batchStatements are the set-oriented statements of the reclaimer, built
// once by New from the validated mapping.
type batchStatements struct {
	idCast     string // cast of a text id to the id column's type
	updatedTyp string // "timestamp" or "timestamptz"
	snapshot   string // $1 ids text[]
	active     string // $1 processing
	fail       string // $1 failed, $2 reason, $3 ids, $4 statuses, $5 updated_at as text, $6 generations
}

func buildBatchStatements(t Table, cat catalog) batchStatements {
	q := ident.Quote
	tbl := t.QualifiedName()
	var b batchStatements
	switch id := cat.columns[t.IDColumn]; {
	case id.name == "uuid":
		b.idCast = "::uuid"
	case isInteger(id):
		b.idCast = "::int8"
	}
	b.updatedTyp = cat.columns[t.UpdatedAtColumn].name

	// asUTC reads a timestamp column as a timestamptz: a column without time
	// zone holds UTC wall time.
	asUTC := func(alias, col string) string {
		c := alias + q(col)
		if cat.columns[col].name == "timestamp" {
			return "(" + c + " AT TIME ZONE 'UTC')"
		}
		return c
	}
	cols := func(alias string) string {
		typ, gen, parent, started := "''::text", "0::int8", "NULL::text", "NULL::timestamptz"
		if t.TypeColumn != "" {
			typ = alias + q(t.TypeColumn) + "::text"
		}
		if t.GenerationColumn != "" {
			gen = alias + q(t.GenerationColumn) + "::int8"
		}
		if t.ParentIDColumn != "" {
			parent = alias + q(t.ParentIDColumn) + "::text"
		}
		if t.StartedAtColumn != "" {
			started = asUTC(alias, t.StartedAtColumn)
		}
		return fmt.Sprintf("%s%s::text, %s, %s%s::text, %s, %s, %s, %s, %s%s::text",
			alias, q(t.IDColumn), typ, alias, q(t.StatusColumn), asUTC(alias, t.UpdatedAtColumn), gen, parent, started,
			alias, q(t.FailureReasonColumn))
	}

	b.snapshot = fmt.Sprintf(`SELECT %s FROM %s WHERE %s = ANY($1::text[]%s[])`,
		cols(""), tbl, q(t.IDColumn), b.idCast)
	b.active = fmt.Sprintf(`SELECT %s FROM %s WHERE %s = $1`, cols(""), tbl, q(t.StatusColumn))

	fence := ""
	if t.GenerationColumn != "" {
		fence = fmt.Sprintf(" AND t.%s = e.generation", q(t.GenerationColumn))
	}
	b.fail = fmt.Sprintf(
		`UPDATE %s AS t SET %s = $1, %s = $2, %s = %s`+
			` FROM unnest($3::text[], $4::text[], $5::text[], $6::int8[]) AS e(id, status, updated_at, generation)`+
			` WHERE t.%s = e.id%s AND t.%s::text = e.status AND t.%s = e.updated_at::%s%s`+
			` RETURNING %s`,
		tbl, q(t.StatusColumn), q(t.FailureReasonColumn), q(t.UpdatedAtColumn), nowExpr(cat.columns[t.UpdatedAtColumn]),
		q(t.IDColumn), b.idCast, q(t.StatusColumn), q(t.UpdatedAtColumn), b.updatedTyp, fence,
		cols("t."))
	return b
}

// scanJobStates reads rows of the batch statements' column list.
func scanJobStates(rows pgx.Rows) ([]JobState, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (JobState, error) {
		var s JobState
		var parent, reason *string
		var started *time.Time
		err := r.Scan(&s.ID, &s.Type, &s.Status, &s.UpdatedAt, &s.Generation, &parent, &started, &reason)
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

// normalID returns jobID in the form the id column gives back as text, or
// false when jobID cannot be an id of the column.
func (g *Guard) normalID(jobID string) (string, bool) {
	v, err := g.idArg(jobID)
	if err != nil {
		return "", false
	}
	return canonicalID(v), true
}

// Snapshot reads the rows of ids in one query and returns them keyed by the
// id as given. Ids with no row, and ids that cannot be values of the id
// column (not a uuid, not an integer), are absent from the map.
func (g *Guard) Snapshot(ctx context.Context, db DB, ids []string) (map[string]JobState, error) {
	given := make(map[string][]string, len(ids)) // normal id → ids as given
	norm := make([]string, 0, len(ids))
	for _, id := range ids {
		n, ok := g.normalID(id)
		if !ok {
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

// ActiveJobs returns every PROCESSING job in one query. StartedAt is the
// start of the current attempt as Start stamped it, or the zero time when
// the row has none (or the table has no started-at column).
func (g *Guard) ActiveJobs(ctx context.Context, db DB) ([]JobState, error) {
	rows, err := db.Query(ctx, g.batch.active, g.table.Statuses.Processing)
	if err != nil {
		return nil, fmt.Errorf("jobguard: active jobs: %w", err)
	}
	states, err := scanJobStates(rows)
	if err != nil {
		return nil, fmt.Errorf("jobguard: active jobs: %w", err)
	}
	return states, nil
}

// FailIfUnchanged writes FAILED with reason to every job of expected whose
// row still has exactly the status, updated_at and (on a fenced table)
// generation that expected records, in one conditional UPDATE. It returns
// the rows that really changed, as they are after the write; a job whose
// row moved in between (progress, completion, a new start) is left alone and
// absent from the result.
//
// The comparison of updated_at is exact, also for a timestamp column without
// time zone (read as UTC wall time). Pass states read by Snapshot or
// ActiveJobs. Give it a pgx.Tx to make the follow-up writes (parents) part of
// the same transaction.
func (g *Guard) FailIfUnchanged(ctx context.Context, db DB, expected []JobState, reason string) ([]JobState, error) {
	type want struct {
		id, status, updated string
		gen                 int64
	}
	byID := make(map[string]want, len(expected))
	for _, e := range expected {
		n, ok := g.normalID(e.ID)
		if !ok {
			return nil, fmt.Errorf("jobguard: fail unchanged: %w: %q", ErrInvalidJobID, e.ID)
		}
		byID[n] = want{n, e.Status, g.formatUpdated(e.UpdatedAt), e.Generation}
	}
	if len(byID) == 0 {
		return nil, nil
	}
	// A fixed lock order keeps two concurrent sweeps over the same jobs from
	// deadlocking on each other's rows.
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	statuses := make([]string, len(ids))
	updated := make([]string, len(ids))
	gens := make([]int64, len(ids))
	for i, id := range ids {
		w := byID[id]
		statuses[i], updated[i], gens[i] = w.status, w.updated, w.gen
	}
	rows, err := db.Query(ctx, g.batch.fail, g.table.Statuses.Failed, reason, ids, statuses, updated, gens)
	if err != nil {
		return nil, fmt.Errorf("jobguard: fail unchanged: %w", err)
	}
	changed, err := scanJobStates(rows)
	if err != nil {
		return nil, fmt.Errorf("jobguard: fail unchanged: %w", err)
	}
	return changed, nil
}

// formatUpdated renders t as a literal of the updated_at column's type that
// parses back to exactly the stored value, whatever the session's time zone.
func (g *Guard) formatUpdated(t time.Time) string {
	const layout = "2006-01-02 15:04:05.999999"
	s := t.UTC().Format(layout)
	if g.batch.updatedTyp == "timestamptz" {
		s += "+00"
	}
	return s
}
