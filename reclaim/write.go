package reclaim

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/interval"
	"github.com/jobguard/jobguard/jobguard"
)

// outcome is what the write did with the jobs chosen for reclaim.
type outcome struct {
	failed     []jobguard.JobState
	moved      int // rows changed since they were read: lost races
	locked     int // rows another transaction held: skipped
	ruleErrors int // jobs left alone because their parent rule failed
	ruleErr    error
}

func (o *outcome) add(res jobguard.FailResult) {
	o.failed = append(o.failed, res.Failed...)
	o.moved += res.Moved
	o.locked += res.Locked
}

// write fails the chosen jobs whose rows are still as read. Without parent
// rules that is one statement. With them it is one transaction: the batch
// and its rules run inside a savepoint; when a rule fails, the savepoint is
// rolled back and the batch runs again without that rule's jobs, which are
// then tried one at a time, each in a savepoint of its own. So one parent
// that refuses a write, or that another transaction holds for longer than
// LivenessTimeout (the transaction's lock_timeout), holds back only its own
// job, which the next sweep tries again, and never a job without its
// parent.
func (r *Reclaimer) write(ctx context.Context, chosen []jobguard.JobState, typeOf map[string]string) (outcome, error) {
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
	err := pgx.BeginFunc(ctx, r.cfg.DB, func(tx pgx.Tx) error {
		// A parent row another transaction holds is being written: a rule
		// waits for it no longer than a liveness check would, then fails
		// like any refused rule, and holds back only its own jobs.
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`,
			interval.Millis(r.cfg.LivenessTimeout)); err != nil {
			return err
		}
		batch := chosen
		var alone []jobguard.JobState
		for len(batch) > 0 {
			res, failedType, err := r.attempt(ctx, tx, batch, typeOf)
			if err == nil {
				out.add(res)
				break
			}
			if failedType == "" || ctx.Err() != nil {
				return err
			}
			var rest []jobguard.JobState
			for _, c := range batch {
				if typeOf[c.ID] == failedType {
					alone = append(alone, c)
				} else {
					rest = append(rest, c)
				}
			}
			batch = rest
		}
		for _, c := range alone {
			res, failedType, err := r.attempt(ctx, tx, []jobguard.JobState{c}, typeOf)
			switch {
			case err == nil:
				out.add(res)
			case failedType == "" || ctx.Err() != nil:
				return err
			default:
				out.ruleErrors++
				if out.ruleErr == nil {
					out.ruleErr = fmt.Errorf("job %s: %w", c.ID, err)
				}
				r.log.DebugContext(ctx, "reclaim: parent rule failed; job left for the next sweep",
					slog.String("job_id", c.ID), slog.String("job_type", failedType), slog.Any("error", err))
			}
		}
		return nil
	})
	if err != nil {
		return outcome{}, err
	}
	return out, nil
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
		if err := parentRule(ctx, sp, byType[typ]); err != nil {
			return jobguard.FailResult{}, typ, fmt.Errorf("OnReclaim[%q]: %w", typ, err)
		}
	}
	if err := sp.Commit(ctx); err != nil {
		return jobguard.FailResult{}, "", err
	}
	return res, "", nil
}
