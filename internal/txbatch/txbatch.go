// Package txbatch begins a transaction in the round trip of its first
// statement. A transaction whose first statement decides whether the
// rest runs (a conditional completion, a ledger row that must be new)
// needs that statement's answer before anything else, but not BEGIN's:
// BEGIN cannot refuse where the statement would not, so the two travel
// as one batch (pgx's Batch.BeginTx) and the transaction is pgx's own.
package txbatch

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobguard/jobguard/internal/txstate"
)

// DB is what BeginExec needs of a handle: Begin, and Exec for the
// statement when the handle cannot send a batch that begins a
// transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Begin(ctx context.Context) (pgx.Tx, error)
}

// batcher is a handle that sends batches: a pool, a connection, a pgx.Tx.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// BeginError is BEGIN's own failure: nothing ran.
type BeginError struct{ Err error }

func (e *BeginError) Error() string { return fmt.Sprintf("begin: %v", e.Err) }

// Unwrap returns BEGIN's error.
func (e *BeginError) Unwrap() error { return e.Err }

// BeginExec begins a transaction on db and runs sql with args as its first
// statement. On a pool, or a connection outside any transaction, both go in
// one round trip; on a pgx.Tx (a savepoint) or a handle that cannot send
// batches, Begin then Exec, as before.
//
// On success the transaction is open and the caller commits or rolls it
// back (a pool's connection returns with either). On any error nothing is
// left open: the transaction has been rolled back, and a failure of BEGIN
// itself is a *BeginError.
func BeginExec(ctx context.Context, db DB, sql string, args ...any) (pgx.Tx, pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	tx, err := begin(ctx, db, sql, args,
		func(br pgx.BatchResults) (err error) { tag, err = br.Exec(); return err },
		func(tx pgx.Tx) (err error) { tag, err = tx.Exec(ctx, sql, args...); return err })
	return tx, tag, err
}

// BeginQueryRow is BeginExec for a statement that returns a row: scan
// reads it (and may take pgx.ErrNoRows for an answer, returning nil: the
// transaction is then open as on any success). An error of scan's rolls the
// transaction back, as a failed statement does.
func BeginQueryRow(ctx context.Context, db DB, scan func(pgx.Row) error, sql string, args ...any) (pgx.Tx, error) {
	return begin(ctx, db, sql, args,
		func(br pgx.BatchResults) error { return scan(br.QueryRow()) },
		func(tx pgx.Tx) error { return scan(tx.QueryRow(ctx, sql, args...)) })
}

// begin begins a transaction on db whose first statement is sql: with
// BEGIN in one batch where db allows (inBatch reads the statement's
// result), else Begin then inTx. On an error the transaction is rolled
// back; a failure of BEGIN itself is a *BeginError.
func begin(ctx context.Context, db DB, sql string, args []any, inBatch func(pgx.BatchResults) error, inTx func(pgx.Tx) error) (pgx.Tx, error) {
	sb, ok := db.(batcher)
	if !ok || txstate.Of(db) != txstate.Own {
		tx, err := db.Begin(ctx)
		if err != nil {
			return nil, &BeginError{Err: err}
		}
		if err := inTx(tx); err != nil {
			if rerr := tx.Rollback(ctx); rerr != nil {
				err = errors.Join(err, rerr)
			}
			return nil, err
		}
		return tx, nil
	}
	var b pgx.Batch
	b.BeginTx(pgx.TxOptions{})
	b.Queue(sql, args...)
	br := sb.SendBatch(ctx, &b)
	tx := br.Tx()
	_, err := br.Exec()
	var pe pgx.ErrPreprocessingBatch
	switch {
	case err != nil && errors.As(err, &pe) && pe.SQL() == sql:
		// Preparing the statement failed (pgx prepares a batch's
		// statements before it sends them, and reports that on the first
		// result): the statement's failure, not BEGIN's.
	case err != nil:
		err = &BeginError{Err: err}
	default:
		err = inBatch(br)
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		// Closed already when BEGIN never ran; a pool's connection is
		// released either way.
		if rerr := tx.Rollback(ctx); rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) {
			err = errors.Join(err, rerr)
		}
		return nil, err
	}
	return tx, nil
}
