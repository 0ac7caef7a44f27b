package reclaim

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/interval"
	"github.com/jobguard/jobguard/internal/safe"
	"github.com/jobguard/jobguard/jobguard"
)

// outcome is what the write did with the jobs chosen for reclaim.
type outcome struct {
	failed     []jobguard.JobState
	moved      int // rows changed since they were read: lost races
	locked     int // rows another transaction held: skipped
	ruleErrors int // jobs left alone because their parent rule failed
	ruleErr    error
	panicked   error // the first rule error that is a rule's panic
}

func (o *outcome) add(res jobguard.FailResult) {
	o.failed = append(o.failed, res.Failed...)
	o.moved += res.Moved
	o.locked += res.Locked
}

// write fails the chosen jobs whose rows are still as read. Without parent
// rules that is one statement. With them it is first one transaction for
// the page: the batch and its rules run inside a savepoint; when a rule
// fails, the savepoint is rolled back, that rule's jobs are set aside, and
// the batch runs again without them, until it commits. Then each job set
// aside is tried alone, in a transaction of its own, so that one parent
// that refuses a write holds back only its own job, which the next sweep
// tries again, and never a job without its parent; and what commits stands
// whatever follows.
//
// A parent row another transaction holds is being written: a rule waits
// for it, but the waits of a whole sweep are bounded together (see
// pass.waitUntil), so that the jobs whose parents are free commit within
// the deadline however many parents are held. When it returns an error,
// the outcome still holds what committed before.
func (r *Reclaimer) write(ctx context.Context, p *pass, chosen []jobguard.JobState, typeOf map[string]string) (outcome, error) {
	if len(r.cfg.OnReclaim) == 0 {
		res, err := r.cfg.Guard.Batch().FailIfUnchanged(ctx, r.cfg.DB, chosen, r.cfg.Guard.Shared().ReclaimedReason)
		if err != nil {
			return outcome{}, err
		}
		var out outcome
		out.add(res)
		return out, nil
	}
	var out outcome
	var aside []jobguard.JobState
	err := pgx.BeginFunc(ctx, r.cfg.DB, func(tx pgx.Tx) error {
		batch := chosen
		for len(batch) > 0 {
			if err := r.waitAtMost(ctx, tx, p); err != nil {
				return err
			}
			res, failedType, err := r.attempt(ctx, tx, batch, typeOf)
			if err == nil {
				out.add(res)
				return nil
			}
			if failedType == "" || ctx.Err() != nil {
				return err
			}
			var rest []jobguard.JobState
			for _, c := range batch {
				if typeOf[c.ID] == failedType {
					aside = append(aside, c)
				} else {
					rest = append(rest, c)
				}
			}
			batch = rest
		}
		return nil
	})
	if err != nil {
		return outcome{}, err
	}
	for _, c := range aside {
		var res jobguard.FailResult
		var failedType string
		err := pgx.BeginFunc(ctx, r.cfg.DB, func(tx pgx.Tx) error {
			if err := r.waitAtMost(ctx, tx, p); err != nil {
				return err
			}
			var err error
			res, failedType, err = r.attempt(ctx, tx, []jobguard.JobState{c}, typeOf)
			return err
		})
		switch {
		case err == nil:
			out.add(res)
		case failedType == "" || ctx.Err() != nil:
			return out, err
		default:
			out.ruleErrors++
			if out.ruleErr == nil {
				out.ruleErr = fmt.Errorf("job %s: %w", c.ID, err)
			}
			if out.panicked == nil && safe.AsPanic(err) != nil {
				out.panicked = fmt.Errorf("job %s: %w", c.ID, err)
			}
			r.log.DebugContext(ctx, "reclaim: parent rule failed; job left for the next sweep",
				slog.String("job_id", c.ID), slog.String("job_type", failedType), slog.Any("error", err))
		}
	}
	return out, nil
}

// waitAtMost sets how long the statements of tx, the parent rules', may
// wait for a row another transaction holds (lock_timeout): LivenessTimeout
// at most, within what is left of the sweep's budget for waits and of its
// deadline. Once the budget is spent, a held row fails its rule at once
// (a millisecond), so a rule whose parents are free still goes through.
func (r *Reclaimer) waitAtMost(ctx context.Context, tx pgx.Tx, p *pass) error {
	wait := min(r.cfg.LivenessTimeout, time.Until(p.waitUntil))
	if deadline, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(deadline)/2)
	}
	_, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, interval.Millis(wait))
	return err
}

// attempt fails batch and runs the parent rules of the rows it changed, in a
// savepoint of tx. When a rule fails, everything the attempt wrote is rolled
// back and the rule's job type is returned with the error; any other error
// returns no type.
func (r *Reclaimer) attempt(ctx context.Context, tx pgx.Tx, batch []jobguard.JobState, typeOf map[string]string) (jobguard.FailResult, string, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return jobguard.FailResult{}, "", err
	}
	defer func() { _ = sp.Rollback(ctx) }() // a no-op once released
	res, err := r.cfg.Guard.Batch().FailIfUnchanged(ctx, sp, batch, r.cfg.Guard.Shared().ReclaimedReason)
	if err != nil {
		return jobguard.FailResult{}, "", err
	}
	byType := map[string][]jobguard.JobState{}
	for _, f := range res.Failed {
		typ := typeOf[f.ID]
		if f.Type == "" {
			f.Type = typ
		}
		byType[typ] = append(byType[typ], f)
	}
	for _, typ := range slices.Sorted(maps.Keys(byType)) { // the same order in every sweep
		parentRule := r.cfg.OnReclaim[typ]
		if parentRule == nil {
			continue
		}
		// A rule that panics fails like one that returns an error.
		if err := safe.Call(func() error { return parentRule(ctx, sp, byType[typ]) }); err != nil {
			return jobguard.FailResult{}, typ, fmt.Errorf("OnReclaim[%q]: %w", typ, err)
		}
	}
	if err := sp.Commit(ctx); err != nil {
		return jobguard.FailResult{}, "", err
	}
	return res, "", nil
}
