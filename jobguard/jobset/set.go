package jobset

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/jobguard/jobguard/internal/guardlink"
	"github.com/jobguard/jobguard/internal/interval"
	"github.com/jobguard/jobguard/internal/pgarray"
	"github.com/jobguard/jobguard/internal/pgvalue"
	"github.com/jobguard/jobguard/internal/txstate"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/marker"
)

// Set reads the rows of many jobs of one guard's table in one query
// (Snapshot, Settled, Overdue, ActiveTypes, FinishedTypes, History, Unstarted) and
// fails, in one statement, those still exactly as read (FailIfUnchanged).
// It is safe for concurrent use.
type Set struct {
	guard *jobguard.Guard
	sql   guardlink.SetStatements
}

// New returns the set-oriented operations over guard's table. The
// statements were built when guard was, so New does no I/O. guard must
// not be nil.
func New(guard *jobguard.Guard) *Set {
	return &Set{guard: guard, sql: guardlink.SetOf(guard)}
}

// Job is a job's row as a Set reads and writes it: the
// state a reclaimer decides on, and the state its conditional write is
// matched against.
type Job struct {
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

// scanJobs reads rows of the column list the statements share. The row
// is scanned into the same variables each time, a page holds few distinct
// types and statuses (each is allocated once), and the nullable columns
// need no pointer each: a row costs its id and parent id.
func scanJobs(rows pgx.Rows) ([]Job, error) {
	out := []Job{}
	var in interner
	var j Job
	var typ, status []byte
	var parent, reason pgtype.Text
	var started pgtype.Timestamptz
	_, err := pgx.ForEachRow(rows, []any{&j.ID, (*pgtype.DriverBytes)(&typ), (*pgtype.DriverBytes)(&status), &j.UpdatedAt,
		&j.Generation, &parent, &started, &reason, &j.ReadAt}, func() error {
		j.Type, j.Status = in.of(typ), in.of(status)
		j.ParentID, j.FailureReason = parent.String, reason.String
		j.StartedAt = time.Time{}
		if started.Valid {
			j.StartedAt = started.Time
		}
		out = append(out, j)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// rawText is a text column's bytes as the driver holds them, valid until
// the next row, and whether the column is not NULL.
type rawText struct {
	b     []byte
	valid bool
}

// ScanBytes keeps v: nil is NULL.
func (t *rawText) ScanBytes(v []byte) error {
	t.b, t.valid = v, v != nil
	return nil
}

// interner hands out one string for equal bytes.
type interner map[string]string

func (in *interner) of(b []byte) string {
	if s, ok := (*in)[string(b)]; ok {
		return s
	}
	if *in == nil {
		*in = interner{}
	}
	s := string(b)
	(*in)[s] = s
	return s
}

// Snapshot reads the rows of ids in one query and returns them keyed by the
// id as given. Ids with no row, and ids that cannot be values of the id
// column (not a uuid, not an integer), are absent from the map.
func (s *Set) Snapshot(ctx context.Context, db jobguard.DB, ids []string) (map[string]Job, error) {
	out, err := s.read(ctx, db, s.sql.Snapshot, ids)
	if err != nil {
		return nil, fmt.Errorf("jobguard: snapshot: %w", err)
	}
	return out, nil
}

// ErrHeld is wrapped by Settled's error when some rows were still held by
// another transaction at its context's end: they are left out of its
// result, and the rows it could read are returned beside the error.
var ErrHeld = errors.New("jobguard: rows still held by another transaction")

// settledPollMax bounds the pause between two of Settled's reads.
const settledPollMax = 200 * time.Millisecond

// Settled is Snapshot for rows whose last write's outcome is unknown to its
// writer: a COMMIT (or an autocommitted statement) was sent, and its answer
// never came, because the connection failed or the context ended. It reads
// each row once no transaction holds it (FOR SHARE SKIP LOCKED), that is,
// as the transaction that held it left it, committed or rolled back; it
// reads again, at growing pauses, the rows still held, and returns those
// it could read with an error wrapping ErrHeld if any is still held when
// ctx ends (a worker's long save, a session cut off from the server
// without its knowing). A row held by another writer thus fails only
// itself. Each read is a transaction of its own on db, rolled back, not
// committed (a read that locked rows has nothing to wait on a standby
// for): db is a pool or a connection with no transaction open; any other
// handle is refused with jobguard.ErrInTransaction. Rows that do not exist
// are left out, as by Snapshot.
func (s *Set) Settled(ctx context.Context, db jobguard.DB, ids []string) (map[string]Job, error) {
	// Its statements would run in a transaction the caller opened on db.
	if st := txstate.Of(db); st != txstate.Own {
		return nil, fmt.Errorf("jobguard: settled: %w: db is %v; pass a pool or a connection outside any transaction",
			jobguard.ErrInTransaction, st)
	}
	out := make(map[string]Job, len(ids))
	left, pause := ids, 10*time.Millisecond
	for {
		held, err := s.settledOnce(ctx, db, left, out)
		if err != nil && ctx.Err() != nil {
			// The context ended during a read: the rows read before stand,
			// the others are as good as held.
			return out, fmt.Errorf("jobguard: settled: %w: %d of %d rows unread: %w", ErrHeld, len(ids)-len(out), len(ids), err)
		}
		if err != nil {
			return out, fmt.Errorf("jobguard: settled: %w", err)
		}
		if len(held) == 0 {
			return out, nil
		}
		left = held
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return out, fmt.Errorf("jobguard: settled: %w: %d of %d rows: %w", ErrHeld, len(held), len(ids), context.Cause(ctx))
		case <-t.C:
		}
		pause = min(2*pause, settledPollMax)
	}
}

// settledOnce reads into out the rows of ids that no transaction holds,
// and returns the ids of the rows that exist and are held.
func (s *Set) settledOnce(ctx context.Context, db jobguard.DB, ids []string, out map[string]Job) (held []string, err error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	got, err := s.read(ctx, tx, s.sql.Settled, ids)
	if err != nil {
		return nil, err
	}
	var rest []string
	for _, id := range ids {
		if j, ok := got[id]; ok {
			out[id] = j
		} else {
			rest = append(rest, id)
		}
	}
	if len(rest) == 0 {
		return nil, nil
	}
	// The rest are held, or gone: a plain read tells them apart.
	exist, err := s.read(ctx, tx, s.sql.Snapshot, rest)
	if err != nil {
		return nil, err
	}
	for _, id := range rest {
		if _, ok := exist[id]; ok {
			held = append(held, id)
		}
	}
	return held, nil
}

// read runs sql, a read of the rows of $1, for ids, keyed by the id as given.
func (s *Set) read(ctx context.Context, db jobguard.DB, sql string, ids []string) (map[string]Job, error) {
	given := make(map[string][]string, len(ids)) // canonical id → ids as given
	norm := make([]string, 0, len(ids))
	for _, id := range ids {
		n, err := s.guard.CanonicalID(id)
		if err != nil {
			continue
		}
		if _, seen := given[n]; !seen {
			norm = append(norm, n)
		}
		given[n] = append(given[n], id)
	}
	out := make(map[string]Job, len(norm))
	if len(norm) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, sql, pgarray.Of(norm))
	if err != nil {
		return nil, err
	}
	states, err := scanJobs(rows)
	if err != nil {
		return nil, err
	}
	for _, j := range states {
		for _, id := range given[j.ID] {
			out[id] = j
		}
	}
	return out, nil
}

// ActiveTypes returns the distinct types of the QUEUED and PROCESSING
// jobs, in one statement that probes an index on the type column once per
// type (the bundled migration's partial index on the active jobs) rather
// than reading the jobs. A table without a type column has one type, "".
func (s *Set) ActiveTypes(ctx context.Context, db jobguard.DB) ([]string, error) {
	types, err := s.distinctTypes(ctx, db, s.sql.Types)
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
func (s *Set) FinishedTypes(ctx context.Context, db jobguard.DB) ([]string, error) {
	types, err := s.distinctTypes(ctx, db, s.sql.Finished)
	if err != nil {
		return nil, fmt.Errorf("jobguard: finished types: %w", err)
	}
	return types, nil
}

// distinctTypes runs one of the loose scans of the types; "" is a table
// without a type column: one type, no round trip.
func (s *Set) distinctTypes(ctx context.Context, db jobguard.DB, sql string) ([]string, error) {
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
func (s *Set) Overdue(ctx context.Context, db jobguard.DB, q OverdueQuery) ([]Job, error) {
	if s.sql.Overdue == "" {
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
	sql := s.sql.Overdue
	if q.After != "" {
		// Checked here: the server casts it to the id column's type, and a
		// failed cast would abort a caller's transaction.
		after, err := s.guard.CanonicalID(q.After)
		if err != nil {
			return nil, fmt.Errorf("jobguard: overdue: After: %w", err)
		}
		sql = s.sql.OverdueAfter
		args = append(args, after)
	}
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("jobguard: overdue: %w", err)
	}
	states, err := scanJobs(rows)
	if err != nil {
		return nil, fmt.Errorf("jobguard: overdue: %w", err)
	}
	return states, nil
}

// FailResult is what FailIfUnchanged did with the jobs it was given.
type FailResult struct {
	// Failed are the jobs the call failed, with ID, Type, ParentID and
	// Generation as written and Status the failed status.
	Failed []Job
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
func (s *Set) FailIfUnchanged(ctx context.Context, db jobguard.DB, expected []Job, reason string) (FailResult, error) {
	return s.fail("fail unchanged", expected, reason, s.sql.Fail, nil, func(sql string, args ...any) (pgx.Rows, error) { return db.Query(ctx, sql, args...) })
}

// FailIfUnchangedMarked is FailIfUnchanged that also writes, in the same
// statement, the reclaim marker of every job it fails to markers, a store
// of the same jobs table: the generation the job failed at, reason, and
// the store's TTL, as markers.Write would (a live marker of a higher
// generation is kept). The markers commit exactly with the failures, in
// one round trip, whatever db is: a pool, a connection, or a caller's
// transaction. A job left alone (moved, locked) gets no marker.
func (s *Set) FailIfUnchangedMarked(ctx context.Context, db jobguard.DB, expected []Job, reason string, markers *marker.PostgresStore) (FailResult, error) {
	if markers == nil {
		return FailResult{}, errors.New("jobguard: fail unchanged: the marker store is nil")
	}
	write, key := guardlink.MarkersAlongside(markers, reason)
	if key != s.guard.TableKey() {
		return FailResult{}, fmt.Errorf("jobguard: fail unchanged: the marker store keeps the markers of %s, not of %s", key, s.guard.TableKey())
	}
	// Its errors say that the statement writes the markers too: a wait
	// on a marker row another transaction holds, or a marker the table
	// refuses, fails the whole write.
	return s.fail("fail unchanged and write the markers", expected, reason, s.sql.FailWith(write.SQL(7)), write.Args, func(sql string, args ...any) (pgx.Rows, error) {
		return db.Query(ctx, sql, args...)
	})
}

// BatchDB is a handle that sends a batch that begins a transaction:
// *pgxpool.Pool and *pgx.Conn are.
type BatchDB interface {
	jobguard.DB
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// BeginFailIfUnchanged is FailIfUnchanged as the first statement of a
// transaction it begins on db, both in one round trip (BEGIN travels with
// the write, as pgx's Batch.BeginTx sends them), for a caller that writes
// more in that transaction (the reclaim markers) and commits it. On
// success tx is open, for the caller to commit or roll back; on an error
// nothing is left open. db must be outside any transaction.
func (s *Set) BeginFailIfUnchanged(ctx context.Context, db BatchDB, expected []Job, reason string) (tx pgx.Tx, res FailResult, err error) {
	if st := txstate.Of(db); st != txstate.Own {
		return nil, FailResult{}, fmt.Errorf("jobguard: fail unchanged: %w: db is %v; pass a pool or a connection outside any transaction",
			jobguard.ErrInTransaction, st)
	}
	var br pgx.BatchResults
	res, err = s.fail("fail unchanged", expected, reason, s.sql.Fail, nil, func(sql string, args ...any) (pgx.Rows, error) {
		var b pgx.Batch
		b.BeginTx(pgx.TxOptions{})
		b.Queue(sql, args...)
		br = db.SendBatch(ctx, &b)
		tx = br.Tx()
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
		return br.Query()
	})
	if br != nil {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("jobguard: fail unchanged: %w", cerr)
		}
	} else if err == nil { // nothing to write: a transaction all the same
		tx, err = db.Begin(ctx)
	}
	if err == nil && tx == nil {
		err = errors.New("jobguard: fail unchanged: no transaction began")
	}
	if err != nil {
		if tx != nil {
			_ = tx.Rollback(ctx)
		}
		return nil, FailResult{}, err
	}
	return tx, res, nil
}

// fail is FailIfUnchanged, its write sent by query: sql, a statement of
// Fail's parameters and results, with extra after Fail's parameters. op
// names the write in its errors.
func (s *Set) fail(op string, expected []Job, reason, sql string, extra []any, query func(sql string, args ...any) (pgx.Rows, error)) (FailResult, error) {
	// One entry per row: of two spellings of one job, the later counts.
	at := make(map[string]int, len(expected)) // canonical id → index in rows
	rows := make([]Job, 0, len(expected))
	for _, e := range expected {
		n, err := s.guard.CanonicalID(e.ID)
		if err != nil {
			return FailResult{}, fmt.Errorf("jobguard: %s: %w", op, err)
		}
		e.ID = n
		if i, seen := at[n]; seen {
			rows[i] = e
			continue
		}
		at[n] = len(rows)
		rows = append(rows, e)
	}
	if len(rows) == 0 {
		return FailResult{}, nil
	}
	ids := make([]string, len(rows))
	statuses := make([]string, len(rows))
	updated := make([]time.Time, len(rows))
	gens := make([]int64, len(rows))
	for i, e := range rows {
		ids[i], statuses[i], updated[i], gens[i] = e.ID, e.Status, e.UpdatedAt.UTC(), e.Generation
	}
	// The arrays travel as literals, one string each (see pgarray.Texts).
	var updatedArg any = pgarray.Of(updated)
	if lit, ok := pgarray.Times(updated); ok {
		updatedArg = lit
	}
	failed := s.guard.Table().Statuses.Failed
	args := append([]any{failed, pgvalue.StorableText(reason),
		pgarray.Texts(ids), pgarray.Texts(statuses), updatedArg, pgarray.Ints(gens)}, extra...)
	res, err := query(sql, args...)
	if err != nil {
		return FailResult{}, fmt.Errorf("jobguard: %s: %w", op, err)
	}
	// A changed row is one of rows: its id, and its parent and type when
	// they are as read, are the strings the caller gave, not new ones.
	var out FailResult
	var in interner
	var id, parent rawText
	var typ []byte
	var gen int64
	locked := 0
	_, err = pgx.ForEachRow(res, []any{&id, &gen, &parent, (*pgtype.DriverBytes)(&typ)}, func() error {
		if !id.valid { // the count of the rows locked
			locked = int(gen)
			return nil
		}
		var e Job
		if i, ok := at[string(id.b)]; ok {
			e = rows[i]
		} else { // the column prints it otherwise than CanonicalID does
			e.ID = string(id.b)
		}
		j := Job{ID: e.ID, Type: e.Type, Status: failed, Generation: gen, ParentID: e.ParentID}
		if string(typ) != j.Type {
			j.Type = in.of(typ)
		}
		if string(parent.b) != j.ParentID {
			j.ParentID = string(parent.b)
		}
		out.Failed = append(out.Failed, j)
		return nil
	})
	if err != nil {
		return FailResult{}, fmt.Errorf("jobguard: %s: %w", op, err)
	}
	out.Moved = locked - len(out.Failed)
	out.Locked = len(ids) - locked
	return out, nil
}
