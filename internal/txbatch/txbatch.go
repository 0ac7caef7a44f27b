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
	sb, ok := db.(batcher)
	if !ok || txstate.Of(db) != txstate.Own {
		return beginThenExec(ctx, db, sql, args...)
	}
	var b pgx.Batch
	b.BeginTx(pgx.TxOptions{})
	b.Queue(sql, args...)
	br := sb.SendBatch(ctx, &b)
	tx := br.Tx()
	var tag pgconn.CommandTag
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
		tag, err = br.Exec()
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
		return nil, tag, err
	}
	return tx, tag, nil
}

func beginThenExec(ctx context.Context, db DB, sql string, args ...any) (pgx.Tx, pgconn.CommandTag, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, pgconn.CommandTag{}, &BeginError{Err: err}
	}
	tag, err := tx.Exec(ctx, sql, args...)
	if err != nil {
		if rerr := tx.Rollback(ctx); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return nil, tag, err
	}
	return tx, tag, nil
}
