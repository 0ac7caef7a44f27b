package usage

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/ledgerlink"
	"github.com/jobguard/jobguard/internal/pgvalue"
	"github.com/jobguard/jobguard/internal/txbatch"
	"github.com/jobguard/jobguard/internal/txstate"
	"github.com/jobguard/jobguard/jobguard"
)

// ErrNotConfirmed is Accrue's refusal when the finalize it was given is not
// confirmed: the completion was rejected or not written, or a metadata
// update failed. Nothing was written.
var ErrNotConfirmed = errors.New("usage: finalize is not confirmed")

// Entry is what one job used of one meter.
type Entry struct {
	// Account is billed. It is stored as text, which cannot hold U+0000 or
	// bytes that are not UTF-8: such an account is refused with an error
	// wrapping jobguard.ErrUnstorable before anything is sent.
	Account string
	// Meter names what is measured ("video_seconds", "tokens"). A job accrues
	// at most once per meter. It is stored as text, as Account is, and
	// refused the same way.
	Meter string
	// Quantity is the amount in the meter's integer unit; use a finer unit
	// (milliseconds, not seconds) for fractions. Zero is a quantity like
	// any other: its ledger row says the job used none, and its increment
	// runs once. A negative quantity is refused with an error before
	// anything is sent: usage is never taken back.
	Quantity int64
	// Attributes are stored in the ledger as JSON, so usage can be audited
	// from the ledger alone. Optional: nil and empty both store none (the
	// column is NULL).
	//
	// The column is jsonb, which cannot store U+0000 (in a string or a key:
	// encoding/json writes it as the escape \u0000), the escape of half a
	// surrogate pair or bytes that are not UTF-8 (both only in a
	// json.RawMessage), or a number beyond the range of PostgreSQL's
	// numeric (1e131072, 1e-16384): Attributes holding one are refused with
	// an error wrapping jobguard.ErrUnstorable before anything is sent, and
	// jobguard.IsPermanent reports it. Read back from the database (an
	// earlier accrual's Entry, the entry package settle hands an
	// increment), a number is a json.Number with the digits it was stored
	// with, never a float64 that would round integers beyond 2^53.
	Attributes map[string]any
}

// Accrual is the ledger's answer for one (job, meter).
type Accrual struct {
	// Accrued is true when this call recorded the accrual and ran the
	// increment; false when an earlier call already had, and nothing was
	// done. Inside your transaction (a pgx.Tx) it was recorded there, and
	// counts only once you commit.
	Accrued bool
	// Execution is the execution whose confirmed finalize recorded the row.
	Execution jobguard.Execution
	// Entry is the entry as recorded: this call's, or the earlier one's.
	Entry Entry
	// RecordedAt is when the row was recorded.
	RecordedAt time.Time
}

// Accrue records entry for fin's job in the default ledger (usage_ledger,
// through search_path) and, only when the row is new, runs increment in the
// same transaction. See Ledger.Accrue.
func Accrue(ctx context.Context, db jobguard.DB, fin jobguard.Finalized, entry Entry, increment func(ctx context.Context, tx pgx.Tx) error) (Accrual, error) {
	return defaultLedger.Accrue(ctx, db, fin, entry, increment)
}

// Accrue refuses with ErrNotConfirmed, sending nothing to the database,
// unless fin is confirmed. Otherwise, in one transaction on db, it inserts
// the ledger row keyed by (job, meter) and, only when that row is new, runs
// increment (e.g. UPDATE accounts SET video_seconds = video_seconds + $1).
// A replay, a retried finalize or a second late execution finds the row,
// runs nothing and returns Accrued false with the earlier entry.
//
// BEGIN goes in the round trip of the ledger insert, whose answer alone
// decides whether increment runs. With no increment (nil) on a pool or a
// connection, the ledger row is one statement, atomic by itself, and no
// transaction stands around it.
//
// If increment fails, the ledger row rolls back with it and the error is
// returned as it is, so a later call can accrue. Concurrent calls for the
// same (job, meter) wait on the row: exactly one of them accrues.
//
// Given a pool or a connection outside a transaction, the transaction is
// Accrue's own and has committed when it returns. Given your pgx.Tx, the
// ledger row and the increment are a savepoint of it: they commit with your
// transaction or roll back with it together, so a rolled-back accrual
// leaves no ledger row and a later call bills it; until you commit, other
// calls for the same (job, meter) wait on your transaction. Either way fin
// is a completion that has committed (Finalize refuses a transaction), so
// usage inside your transaction is never billed for a completion that may
// roll back. A connection with a transaction open that is not passed as
// its pgx.Tx is refused with jobguard.ErrInTransaction: the server would
// ignore Accrue's BEGIN, and its COMMIT would commit your transaction.
func (l *Ledger) Accrue(ctx context.Context, db jobguard.DB, fin jobguard.Finalized, entry Entry, increment func(ctx context.Context, tx pgx.Tx) error) (Accrual, error) {
	attrs, err := l.admit(ctx, fin, entry)
	if err != nil {
		return Accrual{}, err
	}
	s := txstate.Of(db)
	if s == txstate.Open {
		return Accrual{}, fmt.Errorf("usage: accrue: %w: db is %v; pass its pgx.Tx, or a connection outside any transaction", jobguard.ErrInTransaction, s)
	}
	at := l.now()
	insert, args := l.insertFor(fin, entry, attrs, at)
	if s == txstate.Own && increment == nil {
		// The ledger row (and its counter's total) is one statement,
		// which is atomic by itself: no transaction needs to stand around
		// it.
		tag, err := db.Exec(ctx, insert, args...)
		if err != nil {
			return Accrual{}, fmt.Errorf("usage: accrue: insert: %w", err)
		}
		acc, err := l.inserted(ctx, db, tag.RowsAffected() > 0, fin, entry, at)
		if err == nil && acc.Accrued {
			l.met.count(ctx, l.met.accrued)
		}
		return acc, err
	}
	// BEGIN travels with the ledger row: only the row's answer decides
	// whether the increment runs.
	tx, tag, err := txbatch.BeginExec(ctx, db, insert, args...)
	if be := (*txbatch.BeginError)(nil); errors.As(err, &be) {
		return Accrual{}, fmt.Errorf("usage: accrue: begin: %w", be.Err)
	}
	if err != nil {
		return Accrual{}, fmt.Errorf("usage: accrue: insert: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit
	acc, err := l.inserted(ctx, tx, tag.RowsAffected() > 0, fin, entry, at)
	if err != nil || !acc.Accrued {
		return acc, err // a duplicate wrote nothing: nothing to commit
	}
	if increment != nil {
		if err := increment(ctx, tx); err != nil {
			return Accrual{}, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return Accrual{}, fmt.Errorf("usage: accrue: commit: %w", err)
	}
	l.met.count(ctx, l.met.accrued)
	return acc, nil
}

// AccrueTx is Accrue's ledger row and increment written straight into tx,
// without a savepoint of their own: for a caller that bills inside a
// transaction it rolls back whole on any error (package settle, which
// confirms its record and bills in one, inserts its ledger rows with the
// confirmation instead, judged by the same rules). When AccrueTx returns an error, tx may be
// unusable: roll it back. The gate is Accrue's: ErrNotConfirmed, with
// nothing sent, unless fin is confirmed. The accrual counts only once you
// commit, and is counted in the metrics when AccrueTx returns.
func (l *Ledger) AccrueTx(ctx context.Context, tx pgx.Tx, fin jobguard.Finalized, entry Entry, increment func(ctx context.Context, tx pgx.Tx) error) (Accrual, error) {
	attrs, err := l.admit(ctx, fin, entry)
	if err != nil {
		return Accrual{}, err
	}
	acc, err := l.write(ctx, tx, fin, entry, attrs, increment)
	if err == nil && acc.Accrued {
		l.met.count(ctx, l.met.accrued)
	}
	return acc, err
}

// admit is the gate of Accrue and AccrueTx: fin must be confirmed and
// entry valid. It returns entry's attributes as JSON, or nil.
func (l *Ledger) admit(ctx context.Context, fin jobguard.Finalized, entry Entry) (*string, error) {
	if !fin.Confirmed() {
		l.met.count(ctx, l.met.notConfirmed)
		return nil, fmt.Errorf("usage: accrue: job %s: %w", fin.Execution().JobID, ErrNotConfirmed)
	}
	if err := entry.Validate(); err != nil {
		return nil, fmt.Errorf("usage: accrue: %w", err)
	}
	b, err := entry.AttributesJSON()
	if err != nil {
		return nil, fmt.Errorf("usage: accrue: %w", err)
	}
	if b == nil {
		return nil, nil
	}
	s := string(b)
	return &s, nil
}

// write inserts the ledger row of fin's job through tx and, only when it is
// new, runs increment. A duplicate reports the earlier accrual and is
// counted.
func (l *Ledger) write(ctx context.Context, tx pgx.Tx, fin jobguard.Finalized, entry Entry, attrs *string, increment func(ctx context.Context, tx pgx.Tx) error) (Accrual, error) {
	at := l.now()
	insert, args := l.insertFor(fin, entry, attrs, at)
	tag, err := tx.Exec(ctx, insert, args...)
	if err != nil {
		return Accrual{}, fmt.Errorf("usage: accrue: insert: %w", err)
	}
	return l.judge(ctx, tx, tag.RowsAffected() > 0, fin, entry, at, increment)
}

// judge is write's answer once the ledger row's insert has run in tx:
// inserted says whether the row is new, and only then does increment run.
func (l *Ledger) judge(ctx context.Context, tx pgx.Tx, inserted bool, fin jobguard.Finalized, entry Entry, at time.Time, increment func(ctx context.Context, tx pgx.Tx) error) (Accrual, error) {
	acc, err := l.inserted(ctx, tx, inserted, fin, entry, at)
	if err != nil || !acc.Accrued {
		return acc, err
	}
	if increment != nil {
		if err := increment(ctx, tx); err != nil {
			return Accrual{}, err
		}
	}
	return acc, nil
}

// Package settle confirms its record and inserts its ledger rows in one
// statement; the way in is internal/ledgerlink, no part of the Ledger's
// API. Its entries are judged, counted and incremented as AccrueTx's.
func init() {
	ledgerlink.Of = func(ledger any) ledgerlink.Ledger {
		l := ledger.(*Ledger)
		return ledgerlink.Ledger{
			Insert:  l.insertFrom,
			Counted: func(meter string) bool { _, ok := l.totals[meter]; return ok },
			Count:   l.count,
			Table:   func(meter string) string { return l.counters[meter].tbl },
			CountFrom: func(meter, rows string) string {
				c := l.counters[meter]
				return upsert(c.tbl, c.key, c.col, rows) + ` RETURNING 1`
			},
			Now: l.now,
			Accrued: func(ctx context.Context, tx pgx.Tx, fin jobguard.Finalized, entry any, inserted bool, at time.Time,
				increment func(ctx context.Context, tx pgx.Tx) error) (any, error) {
				e := entry.(Entry)
				if _, err := l.admit(ctx, fin, e); err != nil {
					return Accrual{}, err
				}
				acc, err := l.judge(ctx, tx, inserted, fin, e, at, increment)
				if err == nil && acc.Accrued {
					l.met.count(ctx, l.met.accrued)
				}
				return acc, err
			},
			Judged: func(ctx context.Context, db jobguard.DB, fin jobguard.Finalized, entry any, inserted bool, at time.Time) (any, error) {
				acc, err := l.inserted(ctx, db, inserted, fin, entry.(Entry), at)
				if err == nil && acc.Accrued {
					l.met.count(ctx, l.met.accrued)
				}
				return acc, err
			},
		}
	}
}

// count adds each entry's quantity (usage.Entry values of counted meters)
// to its account's total, in tx, in one order whatever the order given:
// by counter table, then account. Concurrent billings then take the rows
// they share in the same order, and do not deadlock each other. The
// upserts go as one batch.
func (l *Ledger) count(ctx context.Context, tx pgx.Tx, entries []any) error {
	es := make([]Entry, len(entries))
	for i, e := range entries {
		es[i] = e.(Entry)
	}
	slices.SortStableFunc(es, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(l.counters[a.Meter].tbl, l.counters[b.Meter].tbl), cmp.Compare(a.Account, b.Account))
	})
	if len(es) == 0 {
		return nil
	}
	// The upserts need no answer between them: one batch, one round trip,
	// run in the order queued.
	var b pgx.Batch
	for _, e := range es {
		b.Queue(l.totals[e.Meter], e.Account, e.Quantity)
	}
	br := tx.SendBatch(ctx, &b)
	for _, e := range es {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return fmt.Errorf("counter of meter %s: %w", e.Meter, err)
		}
	}
	return br.Close()
}

// insertFor returns the statement that inserts entry's ledger row for
// fin's job, and adds to its counter's total when its meter has one, and
// the statement's arguments. The job is keyed by its jobs table and its
// canonical id, as fin names them (jobguard's Finalize and Resume
// canonicalize the id).
func (l *Ledger) insertFor(fin jobguard.Finalized, entry Entry, attrs *string, at time.Time) (string, []any) {
	exec := fin.Execution()
	args := make([]any, 0, 9) // room for a counter's key
	args = append(args, exec.JobID, entry.Meter, exec.Generation, entry.Account, entry.Quantity, attrs, at, fin.TableKey())
	if sql, ok := l.counted[entry.Meter]; ok {
		return sql, append(args, entry.Account)
	}
	return l.insert, args
}

// inserted judges the ledger insert's answer: a new row is this call's
// accrual, recorded at at; none means an earlier accrual committed first,
// which is read through db, reported and counted, and nothing is changed.
func (l *Ledger) inserted(ctx context.Context, db jobguard.DB, inserted bool, fin jobguard.Finalized, entry Entry, at time.Time) (Accrual, error) {
	exec := fin.Execution()
	if !inserted {
		acc, err := l.earlier(ctx, db, fin.TableKey(), exec.JobID, entry.Meter)
		if err != nil {
			return Accrual{}, err
		}
		l.met.count(ctx, l.met.duplicate)
		return acc, nil
	}
	return Accrual{Accrued: true, Execution: exec, Entry: entry, RecordedAt: at}, nil
}

// earlier reads the accrual that an earlier call recorded.
func (l *Ledger) earlier(ctx context.Context, db jobguard.DB, table, jobID, meter string) (Accrual, error) {
	acc := Accrual{Execution: jobguard.Execution{JobID: jobID}, Entry: Entry{Meter: meter}}
	var attrs *string
	err := db.QueryRow(ctx, l.read, jobID, meter, table).Scan(
		&acc.Execution.Generation, &acc.Entry.Account, &acc.Entry.Quantity, &attrs, &acc.RecordedAt)
	if err != nil {
		return Accrual{}, fmt.Errorf("usage: accrue: read earlier accrual: %w", err)
	}
	if attrs != nil {
		if err := pgvalue.UnmarshalJSON(*attrs, &acc.Entry.Attributes); err != nil {
			return Accrual{}, fmt.Errorf("usage: accrue: read earlier accrual: attributes: %w", err)
		}
	}
	return acc, nil
}

// Validate reports what Accrue refuses in e before anything is written: an
// empty Account or Meter, a negative Quantity, and an Account or Meter that
// the ledger's text columns cannot store (wrapping jobguard.ErrUnstorable).
// The error names the field. Its Attributes are AttributesJSON's to check.
func (e Entry) Validate() error {
	switch {
	case e.Account == "":
		return errors.New("Account is empty")
	case e.Meter == "":
		return errors.New("Meter is empty")
	case e.Quantity < 0:
		return fmt.Errorf("Quantity %d is negative", e.Quantity)
	}
	if err := pgvalue.CheckText(e.Account); err != nil {
		return fmt.Errorf("Account: %w: %w", jobguard.ErrUnstorable, err)
	}
	if err := CheckMeter(e.Meter); err != nil {
		return fmt.Errorf("Meter: %w", err)
	}
	return nil
}

// CheckMeter reports whether meter can name a meter of the ledger: not
// empty, and text that PostgreSQL can store (else an error wrapping
// jobguard.ErrUnstorable). Entry.Validate checks an entry's Meter with it.
func CheckMeter(meter string) error {
	if meter == "" {
		return errors.New("meter is empty")
	}
	if err := pgvalue.CheckText(meter); err != nil {
		return fmt.Errorf("%w: %w", jobguard.ErrUnstorable, err)
	}
	return nil
}

// AttributesJSON returns e's Attributes as the ledger stores them: JSON,
// or nil when there are none (nil or empty, however spelled). Attributes
// that encoding/json cannot encode, or that jsonb cannot store (wrapping
// jobguard.ErrUnstorable), return an error naming the field Attributes.
func (e Entry) AttributesJSON() ([]byte, error) {
	if len(e.Attributes) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(e.Attributes)
	if err == nil {
		if err = pgvalue.CheckJSONB(b); err != nil {
			err = fmt.Errorf("%w: %w", jobguard.ErrUnstorable, err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("Attributes: %w", err)
	}
	return b, nil
}
