package settle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobguard/jobguard/internal/interval"
	"github.com/jobguard/jobguard/internal/pgvalue"
	"github.com/jobguard/jobguard/internal/safe"
	"github.com/jobguard/jobguard/jobguard"
)

// Sweep runs one pass: it takes the pending records that are due, most
// overdue first, up to MaxPerSweep, Concurrency at a time, and for each:
//
//  1. reads (jobguard.Guard.Resume) that the job is COMPLETED at the
//     record's generation, and runs the updates still pending through
//     their handlers, recording each success;
//  2. when all have succeeded, confirms the record and bills its usage in
//     one transaction, as Finalize does;
//  3. otherwise leaves it pending, with its error, for BackoffMin doubled
//     per attempt (at most BackoffMax), or gives it up after MaxAttempts
//     attempts, or at once when its job was not completed by its
//     execution.
//
// A record is taken by one statement that skips records other
// transactions hold and pushes it UpdateTimeout + BackoffMin ahead, so any
// number of sweeps, in any number of processes, can run at once: each
// record is worked on by one of them at a time, and billed once whoever
// bills it (a finalize that outlived Grace included). No transaction is
// held open while a handler runs.
//
// The error is non-nil only when records cannot be taken (the database is
// unreachable) or ctx ends; records handled before stand, and the report
// counts them. What happens to each record is counted, and summed up in
// the sweep's one log line, not returned.
func (s *Settler) Sweep(ctx context.Context) (Report, error) {
	start := time.Now()
	var n notes
	rep, err := s.sweep(ctx, &n)
	took := time.Since(start)
	s.met.swept(ctx, err, took)
	s.summarize(ctx, rep, &n, err, took)
	return rep, err
}

// Run sweeps every Interval until ctx ends, then returns nil. Instances need
// no leader: records are taken with SKIP LOCKED and a lease. Run starts no
// goroutine of its own beyond each sweep's workers, which end with it.
func (s *Settler) Run(ctx context.Context) error {
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	for {
		// Sweep logs its own summary line; a panic of the logger or the
		// meter must not end the loop.
		err := safe.Call(func() error {
			_, err := s.Sweep(ctx)
			return err
		})
		safe.Recovered(ctx, s.log, "settle: sweep recovered from a panic", err)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// sweep is Sweep without its metrics and summary.
func (s *Settler) sweep(ctx context.Context, n *notes) (Report, error) {
	var (
		mu       sync.Mutex
		rep      Report
		claimErr error // the first; the other workers meet the same
		budget   atomic.Int64
		wg       sync.WaitGroup
	)
	budget.Store(int64(s.cfg.MaxPerSweep))
	// Every record due when the sweep starts, and none that a failed
	// attempt of this sweep made due again: each is attempted at most once
	// per sweep.
	var dueBy time.Time
	if err := s.cfg.DB.QueryRow(ctx, `SELECT statement_timestamp()`).Scan(&dueBy); err != nil {
		return rep, fmt.Errorf("settle: sweep: read the clock: %w", err)
	}
	for range s.cfg.Concurrency {
		wg.Go(func() {
			for ctx.Err() == nil && budget.Add(-1) >= 0 {
				rec, found, err := s.claim(ctx, dueBy)
				if err != nil || !found {
					mu.Lock()
					if claimErr == nil && ctx.Err() == nil {
						claimErr = err
					}
					mu.Unlock()
					return
				}
				// Handlers and increments fail their record when they panic;
				// this is for a panic of the logger or the meter.
				perr := safe.Call(func() error {
					res := s.attempt(ctx, rec)
					s.met.attempted(ctx, res)
					mu.Lock()
					defer mu.Unlock()
					rep.add(res)
					n.add(res)
					return nil
				})
				safe.Recovered(ctx, s.log, "settle: sweep recovered from a panic; the record is taken again once its lease ends", perr,
					slog.String("job_id", rec.exec.JobID), slog.Int64("generation", rec.exec.Generation))
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("settle: sweep: %w", err)
	}
	return rep, claimErr
}

// afterStopTimeout bounds the write that hands an attempt back once the
// sweep's context has ended.
const afterStopTimeout = 5 * time.Second

// claimed is a record a sweep has taken, the claim that took it and the
// attempt it is on.
type claimed struct {
	record
	// claim is the record's claim number: its fence, which only grows.
	claim   int64
	attempt int
	// unreadable is why the record's columns could not be read, if so.
	unreadable error
}

// lease is how far ahead a claim pushes its record: UpdateTimeout +
// BackoffMin, saturated rather than wrapped past the longest duration.
func (s *Settler) lease() time.Duration { return interval.Sum(s.cfg.UpdateTimeout, s.cfg.BackoffMin) }

// claim takes the next record due by dueBy, if any.
func (s *Settler) claim(ctx context.Context, dueBy time.Time) (claimed, bool, error) {
	var c claimed
	var updates, entries string
	err := s.cfg.DB.QueryRow(ctx, s.sql.claim, micros(s.lease()), dueBy).Scan(
		&c.exec.JobID, &c.exec.Generation, &c.pending, &updates, &entries, &c.attempt, &c.claim)
	if errors.Is(err, pgx.ErrNoRows) {
		return claimed{}, false, nil
	}
	if err != nil {
		return claimed{}, false, fmt.Errorf("settle: sweep: take a record: %w", err)
	}
	// A record that cannot be read is still an attempt: it fails, and is
	// given up in the end, visibly.
	if c.updates, c.unreadable = decodeUpdates(updates); c.unreadable == nil {
		c.usage, c.unreadable = decodeUsage(entries)
	}
	c.usageJSON = entries
	return c, true, nil
}

// attemptResult is one record's attempt, for the report and the summary.
type attemptResult struct {
	exec     jobguard.Execution
	attempt  int
	outcome  outcome
	verdict  verdict
	raced    bool
	ran      int   // updates that succeeded
	accrued  int   // ledger rows written
	unknown  bool  // the record names a handler or meter not registered here
	err      error // why it did not settle
	writeErr error // the verdict could not be written
}

// attempt works on one record the sweep has taken: decide, run, bill,
// write the verdict, in that order.
func (s *Settler) attempt(ctx context.Context, c claimed) attemptResult {
	res := attemptResult{exec: c.exec, attempt: c.attempt}
	res.outcome, res.err = s.run(ctx, c, &res)
	if res.outcome != settled && ctx.Err() != nil {
		// The sweep is stopping (Run's context ended, a deploy): the
		// attempt did not run out, it was cut short. Hand it back, so that
		// a stop during the last attempt cannot give the record up.
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), afterStopTimeout)
		defer cancel()
		_, res.writeErr = s.cfg.DB.Exec(hctx, s.sql.handBack, c.exec.JobID, c.exec.Generation, c.claim, c.attempt)
		res.verdict = verdict{}
		return res
	}
	res.verdict = s.pol.after(c.attempt, res.outcome)
	var tag pgconn.CommandTag
	switch {
	case res.outcome == settled:
	case res.verdict.giveUp:
		tag, res.writeErr = s.cfg.DB.Exec(ctx, s.sql.giveUp, c.exec.JobID, c.exec.Generation,
			pgvalue.StorableText(res.err.Error()), c.claim, c.attempt)
	default:
		tag, res.writeErr = s.cfg.DB.Exec(ctx, s.sql.retry, c.exec.JobID, c.exec.Generation,
			pgvalue.StorableText(res.err.Error()), micros(res.verdict.retryIn), c.claim, c.attempt)
	}
	switch {
	case res.outcome == settled || res.writeErr != nil:
	case tag.RowsAffected() == 0:
		// Another sweep claimed the record after this attempt's lease ran
		// out, or settled it: its verdict stands, not this one's.
		res.raced = true
	case res.verdict.giveUp:
		attrs := []slog.Attr{slog.String("job_id", c.exec.JobID), slog.Int64("generation", c.exec.Generation),
			slog.Int("attempts", c.attempt), slog.Any("error", res.err)}
		s.log.LogAttrs(ctx, slog.LevelWarn, "settle: record given up; its usage is not billed", append(attrs, safe.Attrs(res.err)...)...)
	}
	if s.log.Enabled(ctx, slog.LevelDebug) { // a record's line is built only when it is written
		s.log.DebugContext(ctx, "settle: record attempted", slog.String("job_id", c.exec.JobID),
			slog.Int64("generation", c.exec.Generation), slog.Int("attempt", c.attempt),
			slog.String("result", res.result()), slog.Any("error", res.err))
	}
	return res
}

// run makes one attempt: the pending updates, then the billing.
func (s *Settler) run(ctx context.Context, c claimed, res *attemptResult) (outcome, error) {
	if !s.pol.runs(c.attempt) {
		return exhausted, fmt.Errorf("attempt %d of %d: a sweep stopped during the last attempt", c.attempt, s.pol.maxAttempts)
	}
	if c.unreadable != nil {
		return failed, fmt.Errorf("unreadable record: %w", c.unreadable)
	}
	var todo []storedUpdate
	var missing []string
	for _, name := range c.pending {
		i := slices.IndexFunc(c.updates, func(u storedUpdate) bool { return u.Name == name })
		if i < 0 || s.cfg.Handlers[name] == nil {
			missing = append(missing, name)
			continue
		}
		todo = append(todo, c.updates[i])
	}
	for _, e := range c.usage {
		if !s.billable(e.Meter) {
			missing = append(missing, "meter "+e.Meter)
		}
	}
	if len(missing) > 0 {
		res.unknown = true
		return failed, fmt.Errorf("%w: %q", ErrUnregistered, missing)
	}
	fin, err := s.cfg.Guard.Resume(ctx, s.cfg.DB, c.exec, jobguard.FinalizeSpec{
		Updates: s.runners(c.exec, todo, 0), UpdateTimeout: s.cfg.UpdateTimeout,
	})
	res.ran = len(todo) - len(fin.Failed())
	switch {
	case fin.Rejected():
		res.ran = 0
		return notCompleted, err
	case !fin.Confirmed():
		if !fin.Completed() {
			res.ran = 0
		}
		return failed, err
	}
	b, err := s.bill(ctx, fin, c.record)
	if err != nil {
		return failed, err
	}
	for _, a := range b.accruals {
		if a.Accrued {
			res.accrued++
		}
	}
	res.raced = b.raced
	return settled, nil
}

// result names what became of the record, as the report and the metrics
// count it.
func (r attemptResult) result() string {
	switch {
	case r.raced:
		return "raced"
	case r.outcome == settled:
		return "settled"
	case r.verdict.giveUp:
		return "given_up"
	default:
		return "retrying"
	}
}

// reason says why a record that did not settle did not, for the metrics.
func (r attemptResult) reason() string {
	switch {
	case r.outcome == exhausted:
		return "exhausted"
	case r.outcome == notCompleted:
		return "not_completed"
	case r.unknown:
		return "unregistered"
	default:
		return "failed"
	}
}
