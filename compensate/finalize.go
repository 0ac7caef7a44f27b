package compensate

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/jobguard"
)

// Finalize is Guard.Finalize with the execution's artifacts settled:
//
//   - in the completion's transaction, before spec.Complete, the
//     execution's pending artifacts are marked kept, so they are kept if and
//     only if the completion commits, and are never compensated afterwards;
//   - when the completion is rejected (ErrJobTerminal: reclaimed, finished,
//     superseded, gone), the compensator of each kind is called for exactly
//     this execution's artifacts before Finalize returns, including those a
//     sweep compensated before the execution created them (see
//     CompensateExecution). Those that fail stay owed and are retried by
//     Compensate; the failures are logged, and the returned error is
//     Finalize's own.
//
// Artifacts are kept when the completion is written even if a metadata
// update then fails: the job is COMPLETED and its outputs are in use, so the
// remedy is to re-run the update, not to delete what it points to.
//
// Like Guard.Finalize, it refuses a caller's transaction (a pgx.Tx, or a
// connection with one open) with jobguard.ErrInTransaction before anything
// runs: nothing is kept and nothing is compensated, since the execution's
// outcome is not decided.
func (a *Artifacts) Finalize(ctx context.Context, db jobguard.DB, exec jobguard.Execution, spec jobguard.FinalizeSpec) (jobguard.Finalized, error) {
	if id, err := a.cfg.Guard.CanonicalID(exec.JobID); err == nil {
		exec.JobID = id // else Guard.Finalize refuses it, before anything runs
	}
	complete := spec.Complete
	spec.Complete = func(ctx context.Context, tx pgx.Tx) error {
		if err := a.Keep(ctx, tx, exec); err != nil {
			return err
		}
		if complete != nil {
			return complete(ctx, tx)
		}
		return nil
	}
	fin, err := a.cfg.Guard.Finalize(ctx, db, exec, spec)
	if fin.Rejected() {
		if rep, cerr := a.CompensateExecution(ctx, exec); cerr != nil || rep.Failed > 0 {
			attrs := append(reportAttrs(rep), slog.String("job_id", exec.JobID), slog.Int64("generation", exec.Generation))
			if cerr != nil {
				attrs = append(attrs, slog.Any("error", cerr))
			}
			a.log.WarnContext(ctx, "compensate: rejected execution not fully compensated; the sweep retries", attrs...)
		}
	}
	return fin, err
}

// CompensateExecution marks the artifacts of exec owed, unless the job row
// shows exec completed, and compensates them now: those still pending, and
// those a sweep compensated already, since exec may have created them
// after that (it called CompensateExecution because it has stopped). Call
// it when you learn by other means that exec lost its job (a heartbeat or a
// Fail that returned ErrJobTerminal); Finalize calls it on a rejected
// completion. It runs on Config.DB, each compensation in a transaction of
// its own, never in a caller's.
func (a *Artifacts) CompensateExecution(ctx context.Context, exec jobguard.Execution) (Report, error) {
	var rep Report
	exec, err := a.canonical(exec)
	if err != nil {
		return rep, fmt.Errorf("compensate: execution %s/%d: %w", exec.JobID, exec.Generation, err)
	}
	tag, err := a.cfg.DB.Exec(ctx, a.sql.reject, exec.JobID, exec.Generation, a.cfg.Now(),
		a.cfg.Guard.Table().Statuses.Completed)
	if err != nil {
		return rep, fmt.Errorf("compensate: execution %s/%d: %w", exec.JobID, exec.Generation, err)
	}
	rep.Rejected = int(tag.RowsAffected())
	_, err = a.drain(ctx, passOwed, &exec, a.cfg.MaxPerSweep, &rep)
	return rep, err
}

// Keep marks exec's pending artifacts kept, in tx: call it inside the
// transaction of exec's conditional completion when you complete other than
// through Finalize (settle.Settler.Finalize's Spec.Complete, CompleteTx's
// fn), so that the artifacts are kept if and only if the completion
// commits. Finalize calls it for you. When the completion is rejected,
// call CompensateExecution, as Finalize does.
func (a *Artifacts) Keep(ctx context.Context, tx pgx.Tx, exec jobguard.Execution) error {
	exec, err := a.canonical(exec)
	if err != nil {
		return fmt.Errorf("compensate: keep artifacts: %w", err)
	}
	tag, err := tx.Exec(ctx, a.sql.keep, exec.JobID, exec.Generation, a.cfg.Now())
	if err != nil {
		return fmt.Errorf("compensate: keep artifacts: %w", err)
	}
	a.log.DebugContext(ctx, "compensate: artifacts kept", slog.String("job_id", exec.JobID),
		slog.Int64("generation", exec.Generation), slog.Int64("artifacts", tag.RowsAffected()))
	return nil
}
