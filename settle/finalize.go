package settle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobguard/jobguard/internal/guardlink"
	"github.com/jobguard/jobguard/internal/pgarray"
	"github.com/jobguard/jobguard/internal/pgvalue"
	"github.com/jobguard/jobguard/internal/safe"
	"github.com/jobguard/jobguard/internal/txbatch"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/usage"
)

// Spec says how Finalize completes one execution, what it updates
// afterwards and what it bills.
type Spec struct {
	// Recheck runs right before the completion, as in
	// jobguard.FinalizeSpec: its error stops Finalize before anything is
	// written. Defaults to no re-check.
	Recheck func(ctx context.Context) error
	// Complete runs inside the completion's transaction, after the record
	// is written, as in jobguard.FinalizeSpec. Its error rolls back the
	// completion and the record. Defaults to nothing.
	Complete func(ctx context.Context, tx pgx.Tx) error
	// Updates are the metadata updates, run in parallel once the
	// completion has committed, each through its registered handler.
	// Defaults to none.
	Updates []Update
	// Usage is billed once every update has succeeded, in the transaction
	// that confirms the record: one ledger row per meter, each with its
	// registered increment. Defaults to nothing.
	Usage []usage.Entry
}

// Result is what Finalize did.
type Result struct {
	// Finalized is the finalize's outcome as jobguard reports it:
	// Completed, Rejected, Confirmed.
	Finalized jobguard.Finalized
	// Settled is true when the record is confirmed: every update succeeded
	// and the usage is billed, by this call or by a sweep that got there
	// first.
	Settled bool
	// Accruals are the ledger's answers for this call's billing, one per
	// usage entry; empty when a sweep billed first.
	Accruals []usage.Accrual
}

// Finalize is jobguard's Finalize with a durable record of what it owes:
//
//  1. spec.Recheck runs; if it says stop, nothing is written.
//  2. The conditional completion runs in its own short transaction, and
//     with it, in the completion's own statement and only for the row it
//     completed, the record: the execution, the updates (names and
//     arguments) and the usage entries, pending. A rejected completion
//     leaves no record; a committed one always has one.
//  3. Once that has committed, the updates run in parallel through their
//     handlers. A success is recorded with the statement that follows the
//     updates (the billing, or the record of a failure), or on its own
//     when the other updates are still running a second later (half of
//     Grace, at most), so that a sweep, which takes a record only after
//     Grace, finds the successes of a finalize whose other updates hang.
//     After a crash, an update whose success was not recorded yet runs
//     again, as handlers must bear.
//  4. When all have succeeded, one transaction confirms the record and
//     bills its usage in the ledger (keyed by job and meter, each
//     increment run only for a new ledger row): "confirmed" and "billed"
//     commit together or not at all. When the ledger counts every meter
//     (usage.Config.Counters), none has an increment, and no two add to
//     one account's row, that transaction is a single statement, with the
//     counters' totals in it: one round trip.
//
// In that case a duplicate (a meter the ledger had billed for the job
// already) has its earlier accrual read after the billing committed:
// should that read fail, Finalize returns the Result, Settled, with an
// error that says so, and the duplicate's Accrual holds only its entry.
//
// When an update or the billing fails, or the process dies, the record
// stays pending and the settle sweep finishes it (Sweep, Run): it re-runs
// the pending updates and bills once they succeed. Finalize then returns
// an error wrapping ErrPending, joined with the causes: the job is done and
// must not be retried. Finalize never bills a record the sweep has given
// up (ErrGivenUp), nor twice what the sweep billed first.
//
// The job id is stored, and billed, as the id column prints it (see
// jobguard.Guard.CanonicalID), with its jobs table, so a job spelled two
// ways is one record and one ledger row, and jobs of two tables that share
// an id are two.
//
// Like jobguard's Finalize, it refuses a caller's transaction with
// jobguard.ErrInTransaction before anything runs: the record must commit
// with the completion, and both must have committed before an update runs
// or usage is billed. db runs the completion; Config.DB runs everything
// after it. A spec that names an unregistered handler or meter is refused
// with ErrUnregistered, before anything is written. A spec holding a value
// the record cannot store (U+0000 in Args, Attributes or an Account, and
// the other values Update.Args lists) is refused before anything runs,
// Recheck included, with an error wrapping jobguard.ErrUnstorable that
// names the field: the job is left as it was, for the caller to fail
// (jobguard.IsPermanent reports it) or for the reclaimer.
func (s *Settler) Finalize(ctx context.Context, db jobguard.DB, exec jobguard.Execution, spec Spec) (Result, error) {
	id, err := s.cfg.Guard.CanonicalID(exec.JobID)
	if err != nil {
		return Result{}, fmt.Errorf("settle: finalize: %w", err)
	}
	exec.JobID = id
	if !s.cfg.Guard.Fenced() {
		// A table without generations has one: 0, the record's key too.
		exec.Generation = 0
	}
	rec, cols, err := s.newRecord(exec, spec)
	if err != nil {
		return Result{}, fmt.Errorf("settle: finalize: %w", err)
	}
	fspec := jobguard.FinalizeSpec{
		Recheck:       spec.Recheck,
		Complete:      spec.Complete,
		Updates:       s.runners(exec, rec.updates, s.markAfter()),
		UpdateTimeout: s.cfg.UpdateTimeout,
	}
	// The record travels in the completion's own statement: it is written
	// exactly when the completion is, and the completion stays the first
	// write of its transaction.
	fspec = guardlink.FinalizeAlongside(fspec, guardlink.Alongside{
		SQL:  s.sql.record,
		Args: []any{exec.JobID, exec.Generation, pgarray.Of(rec.pending), cols.updates, cols.usage, micros(s.cfg.Grace)},
	}).(jobguard.FinalizeSpec)
	// Before anything runs, as newRecord's refusals: the names are
	// jobguard's rule.
	if err := fspec.Validate(); err != nil {
		return Result{}, fmt.Errorf("settle: finalize: %w", err)
	}
	fin, err := s.cfg.Guard.Finalize(ctx, db, exec, fspec)
	res := Result{Finalized: fin}
	switch {
	case !fin.Completed():
		// Rejected, stopped, refused, or the commit's outcome is unknown
		// (if it did commit, its record is the sweep's after Grace).
		s.met.finalized(ctx, s.met.notCompleted)
		return res, err
	case !fin.Confirmed():
		// Let the sweep try once BackoffMin has passed rather than Grace,
		// leave the cause on the record for an operator, and record the
		// updates that succeeded, so that the sweep runs only the others:
		// only while no sweep has claimed it (claim 0, attempt 0), as none
		// does within its Grace. Once one has, the sweep's verdicts are
		// the record's.
		err = s.recordFailure(ctx, exec, fin.Failed(), err)
		s.met.finalized(ctx, s.met.pending)
		return res, fmt.Errorf("%w: %w", ErrPending, err)
	}
	b, err := s.bill(ctx, fin, rec)
	if err != nil {
		s.met.finalized(ctx, s.met.pending)
		if errors.Is(err, ErrGivenUp) {
			return res, err
		}
		// Every update succeeded: only the billing is left to the sweep.
		err = s.recordFailure(ctx, exec, nil, err)
		return res, fmt.Errorf("%w: %w", ErrPending, err)
	}
	s.met.finalized(ctx, s.met.settled)
	res.Settled, res.Accruals = true, b.accruals
	if b.unread != nil {
		return res, fmt.Errorf("settle: finalize: settled; reading the accruals back: %w", b.unread)
	}
	return res, nil
}

// runners turns a record's updates into jobguard updates, each running
// its handler and recording its success on the record while the slower
// ones still run, markAfter after it succeeded: a sweep takes a record
// only once its Grace has passed, and a success recorded by then is not
// run again. The last success needs no record of its own: the billing
// transaction that follows at once records every update as it confirms
// the record. Nor does one that the others catch up with before
// markAfter, in a finalize (markAfter > 0): the billing records it, or,
// when another update failed, the statement that leaves the record to the
// sweep (Finalize), so a finalize whose updates take about as long as one
// another spends no round trip on a record its next statement writes
// anyway. Should the process die in between, the sweep runs again every
// update whose success was not recorded, as handlers must bear.
func (s *Settler) runners(exec jobguard.Execution, updates []storedUpdate, markAfter time.Duration) []jobguard.Update {
	var mu sync.Mutex
	left, failed := len(updates), false
	done := make(chan struct{}) // closed once every update has returned
	out := make([]jobguard.Update, len(updates))
	for i, u := range updates {
		h := s.cfg.Handlers[u.Name]
		out[i] = jobguard.Update{Name: u.Name, Run: func(ctx context.Context) error {
			err := h(ctx, exec, u.Args)
			mu.Lock()
			left--
			failed = failed || err != nil
			last := left == 0 && !failed
			if left == 0 {
				close(done)
			}
			mu.Unlock()
			if err != nil || last {
				return err
			}
			if markAfter > 0 {
				t := time.NewTimer(markAfter)
				defer t.Stop()
				select {
				case <-done:
					return nil
				case <-ctx.Done():
					return nil
				case <-t.C:
				}
			}
			// A success that cannot be recorded is a failure: the handler
			// runs again, which it must bear.
			if err := s.mark(ctx, exec, u.Name); err != nil {
				return fmt.Errorf("record success: %w", err)
			}
			return nil
		}}
	}
	return out
}

// recordFailure leaves exec's record to the sweep after BackoffMin with
// cause, and with only the updates failed pending, also once ctx has ended:
// a success not recorded would run again.
func (s *Settler) recordFailure(ctx context.Context, exec jobguard.Execution, failed []string, cause error) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), afterStopTimeout)
	defer cancel()
	if _, err := s.cfg.DB.Exec(wctx, s.sql.unconfirmed, exec.JobID, exec.Generation, pgvalue.StorableText(cause.Error()),
		micros(s.cfg.BackoffMin), 0, 0, pgarray.Of(failed)); err != nil {
		return errors.Join(cause, fmt.Errorf("settle: finalize: record the failure: %w", err))
	}
	return cause
}

// markAfter is how long a finalize's update that succeeded waits for the
// others before it records its success alone: half of Grace, so that the
// record is written before a sweep may take it, and a second at most.
func (s *Settler) markAfter() time.Duration {
	return max(min(s.cfg.Grace/2, time.Second), time.Nanosecond)
}

// mark records that exec's update name succeeded, in one round trip and
// without waiting for the server to flush it to disk
// (synchronous_commit off, for this transaction only): a mark lost to a
// server crash only runs an idempotent handler again, and the commit that
// confirms the record, which does wait, flushes every mark before it. The
// two statements of the batch are one implicit transaction.
func (s *Settler) mark(ctx context.Context, exec jobguard.Execution, name string) error {
	var b pgx.Batch
	b.Queue(`SELECT set_config('synchronous_commit', 'off', true)`)
	b.Queue(s.sql.mark, exec.JobID, exec.Generation, name)
	return s.cfg.DB.SendBatch(ctx, &b).Close()
}

// beginConfirm begins the billing transaction, confirms exec's record in
// it and inserts the ledger rows of the record's usage, recorded at at, in
// one round trip (BEGIN travels with the statement, as pgx's Batch.BeginTx
// sends them): BEGIN cannot refuse where the confirmation would not, the
// confirmation takes the record's row lock before anything is billed, and
// the ledger rows go in only when it matched. raw is the record's usage,
// nil when no pending record was confirmed (raced, or given up): the
// transaction is open either way, for the caller to commit or roll back.
// inserted are the meters whose ledger row is new. On an error nothing is
// left open.
func (s *Settler) beginConfirm(ctx context.Context, fin jobguard.Finalized, at time.Time) (tx pgx.Tx, raw *string, inserted []string, err error) {
	exec := fin.Execution()
	tx, err = txbatch.BeginQueryRow(ctx, s.cfg.DB, func(row pgx.Row) error {
		var usage string
		switch err := row.Scan(&usage, &inserted); {
		case err == nil:
			raw = &usage
			return nil
		case errors.Is(err, pgx.ErrNoRows):
			return nil
		default:
			return err
		}
	}, s.sql.confirm, exec.JobID, exec.Generation, fin.TableKey(), exec.JobID, exec.Generation, at)
	if be := (*txbatch.BeginError)(nil); errors.As(err, &be) {
		return nil, nil, nil, fmt.Errorf("settle: bill: %w", err)
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("settle: bill: confirm: %w", err)
	}
	return tx, raw, inserted, nil
}

// billing is what one billing transaction found and did.
type billing struct {
	// accruals are the ledger's answers, one per entry.
	accruals []usage.Accrual
	// raced is true when the record was confirmed already (by a finalize
	// or a sweep that got there first): nothing was done.
	raced bool
	// unread is why billCounted could not read the accruals back once
	// its billing had committed (a duplicate's earlier accrual, whose
	// Accrual then has only the entry).
	unread error
}

// billAttempts is how many times bill tries a billing that the server
// aborted as a deadlock.
const billAttempts = 3

// bill confirms fin's record, rec, and bills its usage in one transaction
// on Config.DB. fin must be Confirmed: every update of the record
// succeeded. A record that is confirmed already is left as it is (raced);
// one that was given up returns ErrGivenUp and bills nothing.
//
// Billings take the counters' rows in one order, by how the counters and
// accounts are spelled; one row spelled two ways (a table with and
// without its schema, a uuid in two cases) can still be taken in opposite
// orders by two billings, and the server then aborts one of them as a
// deadlock. Nothing of an aborted billing is left, increments included,
// and the other has gone on: the billing is tried again at once, a few
// times, before it is left to the sweep.
func (s *Settler) bill(ctx context.Context, fin jobguard.Finalized, rec record) (billing, error) {
	for attempt := 1; ; attempt++ {
		b, err := s.billOnce(ctx, fin, rec)
		// A panic is the caller's code failing, whatever its value: it
		// fails the billing and is reported, never tried again at once.
		if pe := (*pgconn.PgError)(nil); attempt < billAttempts && ctx.Err() == nil && safe.AsPanic(err) == nil &&
			errors.As(err, &pe) && pe.Code == "40P01" { // deadlock_detected
			continue
		}
		return b, err
	}
}

// billOnce is one try of bill.
func (s *Settler) billOnce(ctx context.Context, fin jobguard.Finalized, rec record) (billing, error) {
	if meters, accounts, ok := s.countedOnly(rec.usage); ok {
		b, err := s.billCounted(ctx, fin, rec, meters, accounts)
		if pe := (*pgconn.PgError)(nil); !errors.As(err, &pe) || pe.Code != "21000" { // cardinality_violation
			return b, err
		}
		// Two meters' counters are one row after all (one table under
		// two names, a key that compares two accounts equal): the
		// statement rolled back whole, and the transaction below takes
		// the row once per meter.
	}
	exec := fin.Execution()
	at := s.ledger.Now()
	tx, raw, inserted, err := s.beginConfirm(ctx, fin, at)
	if err != nil {
		return billing{}, err
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit
	if raw == nil {
		return s.unconfirmed(ctx, tx, exec)
	}
	entries, err := decodeUsage(*raw)
	if err != nil {
		return billing{}, fmt.Errorf("settle: bill: job %s generation %d: %w", exec.JobID, exec.Generation, err)
	}
	// A meter's new row is one entry's: should a record name a meter
	// twice, the second is judged a duplicate, as a second insert would.
	fresh := make(map[string]bool, len(inserted))
	for _, m := range inserted {
		fresh[m] = true
	}
	// The counted meters' totals go first, all of them, in the ledger's one
	// order rather than the record's: two records that bill one account's
	// rows in opposite orders would otherwise lock them in opposite orders
	// and deadlock each other.
	var totals []any
	seen := make(map[string]bool, len(entries))
	for _, e := range entries {
		if fresh[e.Meter] && !seen[e.Meter] && s.ledger.Counted(e.Meter) {
			totals = append(totals, e)
		}
		seen[e.Meter] = true
	}
	if err := s.ledger.Count(ctx, tx, totals); err != nil {
		return billing{}, fmt.Errorf("settle: bill: %w", err)
	}
	var b billing
	for _, e := range entries {
		if !s.billable(e.Meter) {
			return billing{}, fmt.Errorf("settle: bill: %w for meter %q", ErrUnregistered, e.Meter)
		}
		var increment func(ctx context.Context, tx pgx.Tx) error // a counted meter's total is in already
		if inc := s.cfg.Increments[e.Meter]; inc != nil {
			increment = func(ctx context.Context, tx pgx.Tx) error {
				// A panic fails the billing, which rolls back, as an error does.
				return safe.Call(func() error { return inc(ctx, tx, exec, e) })
			}
		}
		acc, err := s.ledger.Accrued(ctx, tx, fin, e, fresh[e.Meter], at, increment)
		delete(fresh, e.Meter)
		if err != nil {
			return billing{}, fmt.Errorf("settle: bill: meter %s: %w", e.Meter, err)
		}
		b.accruals = append(b.accruals, acc.(usage.Accrual))
	}
	if err := tx.Commit(ctx); err != nil {
		return billing{}, fmt.Errorf("settle: bill: commit: %w", err)
	}
	return b, nil
}

// unconfirmed is the billing of exec's record when the confirmation
// matched nothing: the record is confirmed already (raced), or given up
// (ErrGivenUp), as its state read through db says. Nothing was billed.
func (s *Settler) unconfirmed(ctx context.Context, db jobguard.DB, exec jobguard.Execution) (billing, error) {
	var state State
	if err := db.QueryRow(ctx, s.sql.state, exec.JobID, exec.Generation).Scan(&state); err != nil {
		return billing{}, fmt.Errorf("settle: bill: job %s generation %d: read state: %w", exec.JobID, exec.Generation, err)
	}
	switch state {
	case StateGivenUp:
		return billing{}, fmt.Errorf("settle: bill: job %s generation %d: %w", exec.JobID, exec.Generation, ErrGivenUp)
	case StateConfirmed:
		return billing{raced: true}, nil
	}
	// Only billCounted's confirmation can leave a pending record: it
	// confirms one that holds the usage it was built for and nothing
	// else, and a Reopen can make a given-up record pending again
	// after its confirmation found it given up.
	return billing{}, fmt.Errorf("settle: bill: job %s generation %d: the record is %s and was not confirmed", exec.JobID, exec.Generation, state)
}

// countedOnly returns the meters of entries and their accounts in the
// order Count takes their counters' rows (table, then account), when the
// whole billing can be one statement: every meter is counted by the
// ledger, none has an increment, and no two add to one account in one
// table, whose row one statement cannot change twice.
func (s *Settler) countedOnly(entries []usage.Entry) (meters, accounts []string, ok bool) {
	sorted := slices.Clone(entries)
	order := func(a, b usage.Entry) int {
		return cmp.Or(cmp.Compare(s.ledger.Table(a.Meter), s.ledger.Table(b.Meter)), cmp.Compare(a.Account, b.Account))
	}
	slices.SortStableFunc(sorted, order)
	for i, e := range sorted {
		if s.cfg.Increments[e.Meter] != nil || !s.ledger.Counted(e.Meter) || i > 0 && order(sorted[i-1], e) == 0 {
			return nil, nil, false
		}
		meters, accounts = append(meters, e.Meter), append(accounts, e.Account)
	}
	return meters, accounts, true
}

// billCounted is bill for a record whose usage countedOnly admits (meters
// and accounts, in its order): the confirmation, the ledger rows and the
// counters' totals are one statement, which commits by itself, so that
// a finalize's billing is one round trip. It bills rec's usage only if the
// record holds exactly that, as it does unless someone rewrote it. A
// duplicate's earlier accrual is read once the statement has committed:
// should that read fail, the billing stands, the duplicate's Accrual has
// only the entry, and the error is billing.unread.
func (s *Settler) billCounted(ctx context.Context, fin jobguard.Finalized, rec record, meters, accounts []string) (billing, error) {
	exec := fin.Execution()
	at := s.ledger.Now()
	args := make([]any, 0, 7+2*len(meters))
	args = append(args, exec.JobID, exec.Generation, fin.TableKey(), exec.JobID, exec.Generation, at, rec.usageJSON)
	for i := range meters {
		args = append(args, meters[i], accounts[i])
	}
	var raw string
	var inserted []string
	err := s.cfg.DB.QueryRow(ctx, s.sql.counted(meters), args...).Scan(&raw, &inserted)
	if errors.Is(err, pgx.ErrNoRows) {
		return s.unconfirmed(ctx, s.cfg.DB, exec)
	}
	if err != nil {
		return billing{}, fmt.Errorf("settle: bill: confirm: %w", err)
	}
	// The billing has committed: what follows only reports it.
	var b billing
	entries, err := decodeUsage(raw)
	if err != nil {
		b.unread, entries = err, rec.usage
	}
	for _, e := range entries {
		acc, err := s.ledger.Judged(ctx, s.cfg.DB, fin, e, slices.Contains(inserted, e.Meter), at)
		if err != nil {
			b.unread = errors.Join(b.unread, fmt.Errorf("meter %s: %w", e.Meter, err))
			acc = usage.Accrual{Execution: exec, Entry: e}
		}
		b.accruals = append(b.accruals, acc.(usage.Accrual))
	}
	return b, nil
}
