package reclaim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/interval"
	"github.com/jobguard/jobguard/internal/safe"
	"github.com/jobguard/jobguard/internal/txstate"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
)

// outcome is what the write did with the jobs chosen for reclaim.
type outcome struct {
	failed     []jobset.Job
	moved      int // rows changed since they were read: lost races
	locked     int // rows another transaction held: skipped
	ruleErrors int // jobs left alone because their parent rule failed
	ruleErr    error
	panicked   error // the first rule error that is a rule's panic
}

func (o *outcome) add(res jobset.FailResult) {
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
// whatever follows. A rule that breaks the page's transaction (see
// ruleError.broken) sets its jobs aside too, and the rest of the page goes
// on in a new transaction.
//
// A parent row another transaction holds is being written: a rule waits
// for it, but the waits of a whole sweep are bounded together (see
// pass.waitUntil), so that the jobs whose parents are free commit within
// the deadline however many parents are held. When it returns an error,
// the outcome still holds what committed before.
func (r *Reclaimer) write(ctx context.Context, p *pass, chosen []jobset.Job, typeOf map[string]string) (outcome, error) {
	if len(r.cfg.OnReclaim) == 0 {
		return r.writeAll(ctx, chosen)
	}
	out, aside, err := r.writePage(ctx, p, chosen, typeOf)
	if err != nil {
		return outcome{}, err
	}
	err = r.writeAside(ctx, p, aside, typeOf, &out)
	return out, err
}

// failUnchanged fails the jobs of batch still as read, on db, with the
// reclaimer's failure reason, in one statement, which with the markers
// kept in Postgres writes theirs too, so that they commit (or roll back)
// exactly with the reclaim; with Redis, announce writes them after the
// commit.
func (r *Reclaimer) failUnchanged(ctx context.Context, db jobguard.DB, batch []jobset.Job) (jobset.FailResult, error) {
	set, reason := jobset.New(r.cfg.Guard), r.cfg.Guard.Shared().ReclaimedReason
	if r.table != nil {
		return set.FailIfUnchangedMarked(ctx, db, batch, reason, r.table)
	}
	return set.FailIfUnchanged(ctx, db, batch, reason)
}

// writeAll is write without parent rules: one statement, the markers kept
// in Postgres included (one round trip, where a transaction of the write
// and the markers took three).
func (r *Reclaimer) writeAll(ctx context.Context, chosen []jobset.Job) (outcome, error) {
	res, err := r.failUnchanged(ctx, r.cfg.DB, chosen)
	if err != nil {
		return outcome{}, err
	}
	var out outcome
	out.add(res)
	return out, nil
}

// writePage fails the page with its parent rules in one transaction, or
// in a new one after each rule that breaks its own (see writeBatch), and
// returns the jobs set aside because their rule failed.
func (r *Reclaimer) writePage(ctx context.Context, p *pass, chosen []jobset.Job, typeOf map[string]string) (out outcome, aside []jobset.Job, err error) {
	for batch := chosen; len(batch) > 0; {
		var pid uint32
		err := pgx.BeginFunc(ctx, r.cfg.DB, func(tx pgx.Tx) error {
			pid = tx.Conn().PgConn().PID()
			var err error
			batch, err = r.writeBatch(ctx, tx, p, batch, typeOf, &out, &aside)
			return err
		})
		if re := asRuleError(err); err != nil && (re == nil || !re.broken || ctx.Err() != nil) {
			return outcome{}, nil, err
		}
		if err != nil {
			// The broken transaction's connection was closed, but its
			// server process may not have seen it yet, and holds the page's
			// rows until it does: the next transaction would skip them as
			// held by another.
			r.awaitGone(ctx, p, pid)
		}
	}
	return out, aside, nil
}

// awaitGone waits, within what is left of the pass's wait budget, until
// the server process pid has ended.
func (r *Reclaimer) awaitGone(ctx context.Context, p *pass, pid uint32) {
	until := time.Now().Add(r.waitLeft(ctx, p, 0))
	for pause := time.Millisecond; time.Now().Before(until); pause = min(2*pause, 50*time.Millisecond) {
		var alive bool
		err := r.cfg.DB.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)`, int64(pid)).Scan(&alive)
		if err != nil || !alive {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}

// writeBatch attempts batch in tx, setting the jobs of a rule that fails
// aside and attempting the rest again, until an attempt succeeds (its
// result added to out) or fails for another reason. It returns what is
// left of batch: nothing after a success. A rule that leaves tx broken (a
// result still open on its connection, where not even the rollback to a
// savepoint can run) ends tx: its error is returned, and what is left of
// the page goes on in a new transaction.
func (r *Reclaimer) writeBatch(ctx context.Context, tx pgx.Tx, p *pass, batch []jobset.Job, typeOf map[string]string,
	out *outcome, aside *[]jobset.Job) ([]jobset.Job, error) {
	outer, err := r.waitAtMost(ctx, tx, p)
	if err != nil {
		return batch, err
	}
	for len(batch) > 0 {
		res, err := r.attempt(ctx, tx, p, outer, batch, typeOf)
		if err == nil {
			out.add(res)
			return nil, nil
		}
		re := asRuleError(err)
		if re == nil || ctx.Err() != nil {
			return batch, err
		}
		var rest []jobset.Job
		for _, c := range batch {
			if typeOf[c.ID] == re.typ {
				*aside = append(*aside, c)
			} else {
				rest = append(rest, c)
			}
		}
		batch = rest
		if re.broken {
			return batch, err
		}
	}
	return batch, nil
}

// writeAside tries each job set aside alone, in a transaction of its own,
// so that a parent that refuses a write holds back only its own job. A job
// whose rule fails again is counted in out and left for the next sweep.
func (r *Reclaimer) writeAside(ctx context.Context, p *pass, aside []jobset.Job, typeOf map[string]string, out *outcome) error {
	for _, c := range aside {
		var res jobset.FailResult
		err := pgx.BeginFunc(ctx, r.cfg.DB, func(tx pgx.Tx) error {
			outer, err := r.waitAtMost(ctx, tx, p)
			if err != nil {
				return err
			}
			res, err = r.attempt(ctx, tx, p, outer, []jobset.Job{c}, typeOf)
			return err
		})
		re := asRuleError(err)
		switch {
		case err == nil:
			out.add(res)
		case re == nil || ctx.Err() != nil:
			return err
		default:
			r.ruleFailed(ctx, out, c, re, err)
		}
	}
	return nil
}

// ruleFailed counts, keeps and logs the failure of c's parent rule.
func (r *Reclaimer) ruleFailed(ctx context.Context, out *outcome, c jobset.Job, re *ruleError, err error) {
	out.ruleErrors++
	if out.ruleErr == nil {
		out.ruleErr = fmt.Errorf("job %s: %w", c.ID, err)
	}
	if out.panicked == nil && safe.AsPanic(err) != nil {
		out.panicked = fmt.Errorf("job %s: %w", c.ID, err)
	}
	r.log.DebugContext(ctx, "reclaim: parent rule failed; job left for the next sweep",
		slog.String("job_id", c.ID), slog.String("job_type", re.typ), slog.Any("error", err))
}

// ruleError is the failure of the parent rule of the jobs of type typ, as
// opposed to a failure of the sweep's own statements: it holds back only
// those jobs. The type is a field, not a sentinel value: a table without a
// type column lists every job under the empty type, whose rule is
// OnReclaim[""].
type ruleError struct {
	typ string
	err error
	// broken: the rule left its transaction where no statement can run,
	// not even the rollback to its savepoint (it returned or panicked with
	// a query's rows still open on the connection; see txstate.Broken).
	// The transaction must be given up; the work that remains goes on in
	// another.
	broken bool
}

func (e *ruleError) Error() string { return fmt.Sprintf("OnReclaim[%q]: %v", e.typ, e.err) }

func (e *ruleError) Unwrap() error { return e.err }

// asRuleError returns the *ruleError err wraps, or nil.
func asRuleError(err error) *ruleError {
	var re *ruleError
	if errors.As(err, &re) {
		return re
	}
	return nil
}

// waitAtMost sets how long the statements of tx may wait for a row another
// transaction holds (lock_timeout) to what is left of the sweep's budget
// for waits (see waitLeft), and returns the statement_timeout tx runs
// with, which each parent rule's own is set back to after it (see rule).
func (r *Reclaimer) waitAtMost(ctx context.Context, tx pgx.Tx, p *pass) (string, error) {
	var outer string
	err := tx.QueryRow(ctx, `SELECT current_setting('statement_timeout'), set_config('lock_timeout', $1, true)`,
		interval.Millis(r.waitLeft(ctx, p, 0))).Scan(&outer, nil)
	return outer, err
}

// ruleFloor is the least time a parent rule's statements are given once
// the sweep's budget for waits is spent: enough for a rule whose parents
// are free to write them, little beside a sweep's deadline.
const ruleFloor = 100 * time.Millisecond

// waitLeft is what is left of the sweep's budget for waits (LivenessTimeout
// at most, until pass.waitUntil), at least floor, and never more than half
// of what is left of its deadline.
func (r *Reclaimer) waitLeft(ctx context.Context, p *pass, floor time.Duration) time.Duration {
	wait := max(min(r.cfg.LivenessTimeout, time.Until(p.waitUntil)), floor)
	if deadline, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(deadline)/2)
	}
	return wait
}

// attempt fails batch and runs the parent rules of the rows it changed, in a
// savepoint of tx. When a rule fails, everything the attempt wrote is rolled
// back and the error is a *ruleError that names the rule's job type; any
// other error is the page's own. outer is tx's statement_timeout.
func (r *Reclaimer) attempt(ctx context.Context, tx pgx.Tx, p *pass, outer string, batch []jobset.Job, typeOf map[string]string) (jobset.FailResult, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return jobset.FailResult{}, err
	}
	defer func() { _ = sp.Rollback(ctx) }() // a no-op once released
	res, err := r.failUnchanged(ctx, sp, batch)
	if err != nil {
		return jobset.FailResult{}, err
	}
	byType := map[string][]jobset.Job{}
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
		ruleErr, broken, err := r.rule(ctx, sp, p, outer, parentRule, byType[typ])
		if err != nil {
			return jobset.FailResult{}, err
		}
		if ruleErr != nil {
			return jobset.FailResult{}, &ruleError{typ: typ, err: ruleErr, broken: broken}
		}
	}
	if err := sp.Commit(ctx); err != nil {
		return jobset.FailResult{}, err
	}
	return res, nil
}

// rule runs parentRule for jobs in a savepoint of its own, so that what it
// leaves behind is its alone: a statement it let fail (the savepoint no
// longer releases) or a wait that ran out. PostgreSQL bounds each lock
// wait and each statement on its own, so before the rule both timeouts
// are set to what is left of the sweep's budget for waits, at least
// ruleFloor for a statement, and the statement_timeout is set back to
// outer after it. ruleErr is the rule's failure: its error or panic, or
// a savepoint it left that cannot be released or rolled back; broken, that
// the rule left sp where no statement runs (txstate.Broken). err
// is one of the page's own statements failing before the rule ran.
func (r *Reclaimer) rule(ctx context.Context, sp pgx.Tx, p *pass, outer string, parentRule ParentRule, jobs []jobset.Job) (ruleErr error, broken bool, err error) {
	rsp, err := sp.Begin(ctx)
	if err != nil {
		return nil, false, err
	}
	_, err = rsp.Exec(ctx, `SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true)`,
		interval.Millis(r.waitLeft(ctx, p, 0)), interval.Millis(r.waitLeft(ctx, p, ruleFloor)))
	if err != nil {
		_ = rsp.Rollback(ctx)
		return nil, false, err
	}
	// A rule that panics fails like one that returns an error.
	ruleErr = safe.Call(func() error { return parentRule(ctx, rsp, jobs) })
	if ruleErr == nil {
		_, ruleErr = rsp.Exec(ctx, `SELECT set_config('statement_timeout', $1, true)`, outer)
		if ruleErr == nil {
			ruleErr = rsp.Commit(ctx)
		}
		if ruleErr != nil {
			ruleErr = fmt.Errorf("the rule returned, but its savepoint does not release: %w", ruleErr)
		}
	}
	if ruleErr != nil {
		if err := rsp.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
			ruleErr = errors.Join(ruleErr, fmt.Errorf("roll back the rule's savepoint: %w", err))
		}
		broken = txstate.Broken(sp)
	}
	return ruleErr, broken, nil
}
