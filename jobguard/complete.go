package jobguard

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/guardlink"
	"github.com/jobguard/jobguard/internal/txbatch"
	"github.com/jobguard/jobguard/internal/txstate"
)

// CompleteIfActive writes COMPLETED only while the job is QUEUED or
// PROCESSING and, on a fenced table, still at exec's generation. When that
// affects zero rows it returns a *StateError wrapping ErrJobTerminal, saying
// why when it can (not found, which status, superseded).
//
// Make it the first write of the transaction that saves the job's results:
// if it fails, return its error so the transaction rolls back and none of
// the results land. CompleteTx does exactly that. Given a pool or a
// connection outside a transaction, the completion commits on its own
// before CompleteIfActive returns; given a pgx.Tx, it commits only when
// that transaction does.
func (g *Guard) CompleteIfActive(ctx context.Context, db DB, exec Execution) error {
	return g.met.completed(ctx, g.run(ctx, db, g.sql.completeActive, exec))
}

// CompleteIfProcessing is CompleteIfActive for paths that must not complete
// a job that was never started: it writes COMPLETED only from PROCESSING.
func (g *Guard) CompleteIfProcessing(ctx context.Context, db DB, exec Execution) error {
	return g.met.completed(ctx, g.run(ctx, db, g.sql.completeProcessing, exec))
}

// CompleteTx begins a transaction on db, runs CompleteIfActive as its first
// statement, then fn, then commits. If the completion is refused, fn never
// runs and nothing is written; if fn fails, the completion rolls back with
// its rows. fn's own error is returned as it is.
//
// Do the slow work (the model call, the encode) before CompleteTx, never
// inside fn: the transaction should be short.
//
// BEGIN is sent with the completion, in one round trip: BEGIN cannot
// refuse where the completion would not, and only the completion's answer
// decides whether fn runs.
//
// Given a pool or a connection outside a transaction, the transaction is
// CompleteTx's own, and a nil error means the completion and fn's writes
// committed. Given your pgx.Tx, they are a savepoint of it: a nil error
// means only that they were written there, and they commit when you commit
// (the completion is then not the first write of your transaction unless
// you made it so; roll back on its error). A connection with a transaction
// open that is not passed as its pgx.Tx is refused with ErrInTransaction,
// since the server would ignore CompleteTx's BEGIN and its COMMIT would
// commit your transaction.
func (g *Guard) CompleteTx(ctx context.Context, db DB, exec Execution, fn func(pgx.Tx) error) error {
	return g.completeTx(ctx, db, exec, nil, fn)
}

// completeTx is CompleteTx whose completion, when a is not nil, carries a
// in its own statement (a data-modifying CTE's reader), so that a's write
// lands exactly when the completion does, in the same round trip.
func (g *Guard) completeTx(ctx context.Context, db DB, exec Execution, a *guardlink.Alongside, fn func(pgx.Tx) error) error {
	if s := txstate.Of(db); s == txstate.Open {
		return fmt.Errorf("jobguard: complete: %w: db is %v; pass its pgx.Tx, or a connection outside any transaction", ErrInTransaction, s)
	}
	w := g.sql.completeActive
	id, args, err := g.writeArgs(w, exec)
	if err != nil {
		return g.met.completed(ctx, err)
	}
	sql := w.sql
	if a != nil {
		sql = `WITH completed AS (` + sql + ` RETURNING 1) ` + a.SQL(len(args)+1)
		args = append(args, a.Args...)
	}
	// BEGIN travels with the completion: only the completion's answer
	// decides whether fn runs.
	tx, tag, err := txbatch.BeginExec(ctx, db, sql, args...)
	if be := (*txbatch.BeginError)(nil); errors.As(err, &be) {
		return fmt.Errorf("jobguard: complete: begin: %w", be.Err)
	}
	if err != nil {
		return g.met.completed(ctx, fmt.Errorf("jobguard: %s: %w", w.op, err))
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit
	if err := g.met.completed(ctx, g.wrote(ctx, tx, w, id, exec, tag)); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("jobguard: complete: commit: %w", err)
	}
	return nil
}
