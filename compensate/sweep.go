package compensate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobguard/jobguard/jobguard"
)

// Report counts what a compensation pass did.
type Report struct {
	// Kept counts pending artifacts found to belong to a completed execution.
	Kept int
	// Rejected counts pending artifacts found to belong to an execution that
	// can no longer complete, now owed compensation.
	Rejected int
	// Compensated counts artifacts undone and marked done.
	Compensated int
	// Failed counts compensation attempts that failed (including kinds with
	// no compensator); those artifacts stay owed.
	Failed int
}

// Compensate runs one sweep: it settles pending artifacts whose execution is
// decided — kept when the job was completed by that execution, owed when the
// job failed or a newer generation owns it — and then compensates owed
// artifacts, oldest first, up to MaxPerSweep.
//
// Each artifact is compensated in its own short transaction that holds its
// row lock (FOR UPDATE SKIP LOCKED), so sweeps in several processes, and
// Finalize's own compensation, never compensate one artifact at the same
// time, and a done artifact is never compensated again. It can run beside
// the reclaimer: it reads the jobs table, never writes it.
func (a *Artifacts) Compensate(ctx context.Context) (Report, error) {
	var rep Report
	now := a.cfg.Now()
	st := a.cfg.Guard.Table().Statuses
	tag, err := a.cfg.DB.Exec(ctx, a.sql.settle, now, st.Completed)
	if err != nil {
		return rep, fmt.Errorf("compensate: sweep: keep: %w", err)
	}
	rep.Kept = int(tag.RowsAffected())
	tag, err = a.cfg.DB.Exec(ctx, a.sql.promote, now, st.Failed)
	if err != nil {
		return rep, fmt.Errorf("compensate: sweep: reject: %w", err)
	}
	rep.Rejected = int(tag.RowsAffected())
	err = a.drain(ctx, nil, &rep)
	return rep, err
}

// Run sweeps every Interval until ctx ends, logging each sweep's failures
// and what it did. It returns nil when ctx ends.
func (a *Artifacts) Run(ctx context.Context) error {
	tick := time.NewTicker(a.cfg.Interval)
	defer tick.Stop()
	for {
		rep, err := a.Compensate(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			a.log.WarnContext(ctx, "compensate: sweep failed", append(reportAttrs(rep), slog.Any("error", err))...)
		case err == nil && rep != (Report{}):
			a.log.InfoContext(ctx, "compensate: sweep", reportAttrs(rep)...)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// drain compensates owed artifacts (of exec only, when exec is not nil) one
// at a time until none is left, MaxPerSweep is reached or the database
// fails. Every artifact is visited at most once per call, so one that keeps
// failing cannot stall the rest.
func (a *Artifacts) drain(ctx context.Context, exec *jobguard.Execution, rep *Report) error {
	var after int64
	for n := 0; n < a.cfg.MaxPerSweep; n++ {
		art, found, err := a.compensateNext(ctx, after, exec, rep)
		if err != nil {
			return err
		}
		if !found {
			return nil
		}
		after = art.ID
	}
	return nil
}

// compensateNext locks the next owed artifact after the given id, runs its
// compensator and records the outcome, all in one transaction.
func (a *Artifacts) compensateNext(ctx context.Context, after int64, exec *jobguard.Execution, rep *Report) (Artifact, bool, error) {
	tx, err := a.cfg.DB.Begin(ctx)
	if err != nil {
		return Artifact{}, false, fmt.Errorf("compensate: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit
	var jobID *string
	var gen *int64
	if exec != nil {
		jobID, gen = &exec.JobID, &exec.Generation
	}
	var art Artifact
	err = tx.QueryRow(ctx, a.sql.next, after, jobID, gen).Scan(
		&art.ID, &art.JobID, &art.Generation, &art.Kind, &art.Ref, &art.Attempts)
	if errors.Is(err, pgx.ErrNoRows) {
		return Artifact{}, false, nil
	}
	if err != nil {
		return Artifact{}, false, fmt.Errorf("compensate: next artifact: %w", err)
	}

	undoErr := a.undo(ctx, tx, art)
	var tag pgconn.CommandTag
	if undoErr == nil {
		tag, err = tx.Exec(ctx, a.sql.done, art.ID, a.cfg.Now())
	} else {
		tag, err = tx.Exec(ctx, a.sql.retry, art.ID, a.cfg.Now(), undoErr.Error())
	}
	if err == nil && tag.RowsAffected() != 1 {
		// The row is locked and was owed when read; anything else is a bug.
		err = fmt.Errorf("artifact %d changed while locked (%d rows)", art.ID, tag.RowsAffected())
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		return art, false, fmt.Errorf("compensate: artifact %d: %w", art.ID, err)
	}
	a.met.attempted(ctx, undoErr)
	if undoErr != nil {
		rep.Failed++
		a.log.WarnContext(ctx, "compensate: compensator failed; retried by the next sweep",
			slog.Int64("artifact_id", art.ID), slog.String("job_id", art.JobID), slog.Int64("generation", art.Generation),
			slog.String("kind", art.Kind), slog.String("ref", art.Ref), slog.Int("attempts", art.Attempts+1),
			slog.Any("error", undoErr))
	} else {
		rep.Compensated++
	}
	return art, true, nil
}

// undo runs art's compensator inside a savepoint of tx, so that a failing
// compensator's writes roll back while the attempt is still recorded.
func (a *Artifacts) undo(ctx context.Context, tx pgx.Tx, art Artifact) error {
	fn, ok := a.cfg.Compensators[art.Kind]
	if !ok {
		return fmt.Errorf("no compensator for kind %q", art.Kind)
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	if err := fn(ctx, sp, art); err != nil {
		_ = sp.Rollback(ctx)
		return err
	}
	return sp.Commit(ctx)
}

func reportAttrs(r Report) []any {
	return []any{slog.Int("kept", r.Kept), slog.Int("rejected", r.Rejected),
		slog.Int("compensated", r.Compensated), slog.Int("failed", r.Failed)}
}
