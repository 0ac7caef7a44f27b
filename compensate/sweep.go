package compensate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/pgvalue"
	"github.com/jobguard/jobguard/internal/safe"
	"github.com/jobguard/jobguard/internal/txstate"
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
	// Rechecked counts artifacts undone a second time, RecheckAfter after
	// the first, for what their execution still had in flight then.
	Rechecked int
	// Spared counts owed artifacts left in place, not undone, because
	// another execution recorded the same kind and ref and may still
	// complete with it, or did: the thing is that execution's output.
	Spared int
	// Failed counts compensation attempts that failed (including kinds with
	// no compensator); those artifacts stay owed.
	Failed int
}

// pass is what a compensation undoes: an owed artifact, or one compensated
// before whose second compensation is due.
type pass int

const (
	passOwed pass = iota
	passRecheck
)

// decision is what a compensation does with the artifact it has locked.
type decision int

const (
	// undoIt: no other execution holds the ref; run the compensator.
	undoIt decision = iota
	// spareIt: another execution's artifact of the ref may still be kept,
	// or was: the thing is its output. Mark ours done, leave the thing.
	spareIt
	// leaveIt: an execution is recording the ref right now, or holds it in
	// an open transaction. Leave both; a later sweep sees its record.
	leaveIt
)

// decide is the rule for one locked artifact. refLocked: this compensation
// holds the ref's lock against Record; heldElsewhere (read only once
// refLocked): another execution's artifact of the ref is pending or kept.
func decide(refLocked, heldElsewhere bool) decision {
	switch {
	case !refLocked:
		return leaveIt
	case heldElsewhere:
		return spareIt
	default:
		return undoIt
	}
}

// Compensate runs one sweep: it settles pending artifacts whose execution is
// decided — kept when the job was completed by that execution, owed when the
// job failed or a newer generation owns it — then compensates owed
// artifacts, oldest first, and then those compensated RecheckAfter ago or
// more by the database's clock, once more: their execution may have created
// them after the first compensation. Up to MaxPerSweep compensations in all.
//
// An artifact is not undone while another execution's artifact of the
// same kind and ref may still be kept, or was: it is marked done and
// counted Spared. An artifact whose ref an execution is recording at that
// moment is left for the next sweep.
//
// Each artifact is compensated in its own short transaction that holds its
// row lock (FOR UPDATE SKIP LOCKED), so sweeps in several processes, and
// Finalize's own compensation, never compensate one artifact at the same
// time; a done artifact is compensated again only by its one recheck, or
// when its execution is found to have stopped (see CompensateExecution).
// It can run beside the reclaimer: it reads the jobs table, never writes
// it.
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
	n, err := a.drain(ctx, passOwed, nil, a.cfg.MaxPerSweep, &rep)
	if err == nil {
		_, err = a.drain(ctx, passRecheck, nil, a.cfg.MaxPerSweep-n, &rep)
	}
	return rep, err
}

// Run sweeps every Interval until ctx ends, logging each sweep's failures
// and what it did. It returns nil when ctx ends.
func (a *Artifacts) Run(ctx context.Context) error {
	tick := time.NewTicker(a.cfg.Interval)
	defer tick.Stop()
	for {
		// A compensator's panic fails its artifact; this is for a panic of
		// the logger or the meter, which must not end the loop.
		perr := safe.Call(func() error {
			rep, err := a.Compensate(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				a.log.WarnContext(ctx, "compensate: sweep failed", append(reportAttrs(rep), slog.Any("error", err))...)
			case err == nil && rep != (Report{}):
				a.log.InfoContext(ctx, "compensate: sweep", reportAttrs(rep)...)
			}
			return nil
		})
		safe.Recovered(ctx, a.log, "compensate: run recovered from a panic", perr)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// drain makes up to max compensations of one pass (of exec's artifacts
// only, when exec is not nil), one at a time, until none is left or the
// database fails, and returns how many artifacts it visited. Every
// artifact is visited at most once per call, so one that keeps failing
// cannot stall the rest.
func (a *Artifacts) drain(ctx context.Context, p pass, exec *jobguard.Execution, max int, rep *Report) (int, error) {
	var after int64
	for n := 0; n < max; n++ {
		art, found, err := a.compensateNext(ctx, p, after, exec, rep)
		if err != nil || !found {
			return n, err
		}
		after = art.ID
	}
	return max, nil
}

// next locks the next artifact of pass p after the given id: for the owed
// pass, of exec only when it is given.
func (a *Artifacts) next(ctx context.Context, tx pgx.Tx, p pass, after int64, exec *jobguard.Execution) (Artifact, bool, error) {
	var row pgx.Row
	if p == passRecheck {
		row = tx.QueryRow(ctx, a.sql.due, after)
	} else if exec != nil {
		row = tx.QueryRow(ctx, a.sql.owedOf, after, exec.JobID, exec.Generation)
	} else {
		row = tx.QueryRow(ctx, a.sql.owed, after)
	}
	var art Artifact
	err := row.Scan(&art.ID, &art.JobID, &art.Generation, &art.Kind, &art.Ref, &art.Attempts)
	if errors.Is(err, pgx.ErrNoRows) {
		return Artifact{}, false, nil
	}
	if err != nil {
		return Artifact{}, false, fmt.Errorf("compensate: next artifact: %w", err)
	}
	return art, true, nil
}

// undoAndRecord runs the artifact's compensator and records the outcome: done
// (with, after the owed pass, its one recheck, RecheckAfter later by the
// database's clock), or owed still with the compensator's error. undoErr is
// the compensator's; err, the record's.
func (a *Artifacts) undoAndRecord(ctx context.Context, tx pgx.Tx, p pass, art Artifact, now time.Time) (undoErr, err error) {
	undoErr, broken := a.undo(ctx, tx, art)
	if undoErr != nil {
		// The message is the compensator's: text may not hold it as it is.
		msg := pgvalue.StorableText(undoErr.Error())
		if !broken {
			return undoErr, a.finish(ctx, tx, art, a.sql.retry, art.ID, now, msg, art.Attempts)
		}
		// No statement runs on tx any more: give it up (its session ends,
		// and the row's lock with it) and record the failure in a
		// statement of its own.
		_ = tx.Rollback(ctx)
		if _, err := a.cfg.DB.Exec(ctx, a.sql.retry, art.ID, now, msg, art.Attempts); err != nil {
			return undoErr, fmt.Errorf("compensate: artifact %d: %w", art.ID, err)
		}
		return undoErr, nil
	}
	var recheckIn *int64 // the second compensation is the last
	if p == passOwed {
		us := a.cfg.RecheckAfter.Microseconds()
		recheckIn = &us
	}
	return nil, a.finish(ctx, tx, art, a.sql.done, art.ID, now, recheckIn)
}

// compensateNext locks the next artifact of pass p after the given id,
// runs its compensator and records the outcome, all in one transaction.
func (a *Artifacts) compensateNext(ctx context.Context, p pass, after int64, exec *jobguard.Execution, rep *Report) (Artifact, bool, error) {
	tx, err := a.cfg.DB.Begin(ctx)
	if err != nil {
		return Artifact{}, false, fmt.Errorf("compensate: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit
	now := a.cfg.Now()
	art, found, err := a.next(ctx, tx, p, after, exec)
	if !found || err != nil {
		return art, false, err
	}

	// Hold the ref against Record until this transaction ends. The other
	// records are read in a statement of their own, after the lock, so
	// that every record committed before it is seen.
	var locked, held bool
	if err := tx.QueryRow(ctx, a.sql.lock, art.Kind, art.Ref).Scan(&locked); err != nil {
		return art, false, fmt.Errorf("compensate: artifact %d: lock ref: %w", art.ID, err)
	}
	if locked {
		if err := tx.QueryRow(ctx, a.sql.held, art.Kind, art.Ref, art.ID).Scan(&held); err != nil {
			return art, false, fmt.Errorf("compensate: artifact %d: read its ref's other records: %w", art.ID, err)
		}
	}
	switch decide(locked, held) {
	case leaveIt:
		a.log.DebugContext(ctx, "compensate: ref being recorded; left for the next sweep", artAttrs(art)...)
		return art, true, nil
	case spareIt:
		if err := a.finish(ctx, tx, art, a.sql.spare, art.ID, now); err != nil {
			return art, false, err
		}
		rep.Spared++
		a.log.InfoContext(ctx, "compensate: artifact spared; another execution holds its ref", artAttrs(art)...)
		return art, true, nil
	}

	undoErr, err := a.undoAndRecord(ctx, tx, p, art, now)
	if err != nil {
		return art, false, err
	}
	a.met.attempted(ctx, undoErr)
	switch {
	case undoErr != nil:
		rep.Failed++
		attrs := append(artAttrs(art), slog.Int("attempts", art.Attempts+1), slog.Any("error", undoErr))
		for _, attr := range safe.Attrs(undoErr) {
			attrs = append(attrs, attr)
		}
		a.log.WarnContext(ctx, "compensate: compensator failed; retried by the next sweep", attrs...)
	case p == passRecheck:
		rep.Rechecked++
	default:
		rep.Compensated++
	}
	return art, true, nil
}

// finish records the outcome of art's compensation with one update of its
// locked row, and commits.
func (a *Artifacts) finish(ctx context.Context, tx pgx.Tx, art Artifact, sql string, args ...any) error {
	tag, err := tx.Exec(ctx, sql, args...)
	if err == nil && tag.RowsAffected() != 1 {
		// The row is locked and was read in a state the update accepts;
		// anything else is a bug.
		err = fmt.Errorf("changed while locked (%d rows)", tag.RowsAffected())
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		return fmt.Errorf("compensate: artifact %d: %w", art.ID, err)
	}
	return nil
}

func artAttrs(art Artifact) []any {
	return []any{slog.Int64("artifact_id", art.ID), slog.String("job_id", art.JobID),
		slog.Int64("generation", art.Generation), slog.String("kind", art.Kind), slog.String("ref", art.Ref)}
}

// undo runs art's compensator inside a savepoint of tx, so that a failing
// compensator's writes roll back while the attempt is still recorded.
// broken is set when the compensator left tx where no statement runs (it
// returned or panicked with a query's rows still open on the connection):
// the attempt must be recorded outside it.
func (a *Artifacts) undo(ctx context.Context, tx pgx.Tx, art Artifact) (err error, broken bool) {
	fn, ok := a.cfg.Compensators[art.Kind]
	if !ok {
		return fmt.Errorf("no compensator for kind %q", art.Kind), false
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("savepoint: %w", err), false
	}
	// A compensator that panics fails like one that returns an error: its
	// writes roll back and the artifact stays owed.
	err = safe.Call(func() error { return fn(ctx, sp, art) })
	if err == nil {
		if err = sp.Commit(ctx); err == nil {
			return nil, false
		}
	}
	if rerr := sp.Rollback(ctx); rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) {
		err = errors.Join(err, fmt.Errorf("roll back the compensator's savepoint: %w", rerr))
	}
	return err, txstate.Broken(tx)
}

func reportAttrs(r Report) []any {
	return []any{slog.Int("kept", r.Kept), slog.Int("rejected", r.Rejected),
		slog.Int("compensated", r.Compensated), slog.Int("rechecked", r.Rechecked),
		slog.Int("spared", r.Spared), slog.Int("failed", r.Failed)}
}
