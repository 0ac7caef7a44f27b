package jobguard

import (
	"context"
	"errors"
	"fmt"
)

// Resume finishes the finalize of an execution whose completion committed
// earlier: its worker died after the commit, or one of its metadata updates
// failed. It reads the job row and, only when the job is COMPLETED at exec's
// generation (on a table without a generation column: COMPLETED), runs
// spec.Updates as Finalize runs them: in parallel, each with its own
// context, waiting for all. The result is Completed, and Confirmed once
// every update succeeded, like Finalize's; Resume may be called again until
// it is.
//
// A row that is not COMPLETED at exec's generation returns a *StateError
// wrapping ErrJobTerminal (Op "resume"; not found, which status, or
// superseded) and a Rejected result: that execution never completed the
// job, so nothing of it may be confirmed, and no update runs. A failed read
// returns its error with a result that reports nothing.
//
// spec.Recheck and spec.Complete belong to the completion, which has
// happened; a spec that sets them is refused, as is one Finalize would
// refuse. The updates run again for every call that gets this far, so they
// must be idempotent.
//
// Like Finalize, Resume reports only what committed: given a pgx.Tx, or a
// connection with a transaction open, it returns ErrInTransaction before
// anything runs, since inside a transaction it could read a completion that
// has not committed and may never commit.
//
// Like Finalize's, the result names the job by its canonical id, however
// exec spells it.
//
// Package settle records what a finalize still owes in the completion's
// transaction and calls Resume from its sweep; most callers want that.
func (g *Guard) Resume(ctx context.Context, db DB, exec Execution, spec FinalizeSpec) (Finalized, error) {
	fin, err := g.finalized(db, exec, spec, "resume")
	if err != nil {
		return fin, err
	}
	switch {
	case spec.Recheck != nil:
		return fin, errors.New("jobguard: resume: Recheck is set: the completion it guards has committed already")
	case spec.Complete != nil:
		return fin, errors.New("jobguard: resume: Complete is set: the completion it joins has committed already")
	case spec.alongside != nil:
		return fin, errors.New("jobguard: resume: a write alongside the completion is set: the completion has committed already")
	}
	if err := g.completedBy(ctx, db, fin.exec); err != nil {
		fin.rejected = errors.Is(err, ErrJobTerminal)
		return fin, err
	}
	err = fin.confirm(ctx, spec, "resume")
	return fin, err
}

// completedBy returns nil when the job's committed row is COMPLETED at
// exec's generation, and otherwise a *StateError that says what the row is.
func (g *Guard) completedBy(ctx context.Context, db DB, exec Execution) error {
	id, err := g.idArg(exec.JobID)
	if err != nil {
		return fmt.Errorf("jobguard: resume: %w", err)
	}
	r, found, err := g.inspect(ctx, db, id)
	if err != nil {
		return fmt.Errorf("jobguard: resume: %w", err)
	}
	if e := whyRefused(g.sql.completed, exec.JobID, exec.Generation, ErrJobTerminal, r, found, nil); e.Reason != ReasonUnknown {
		return e
	}
	return nil
}
