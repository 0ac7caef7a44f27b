package jobguard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/guardlink"
	"github.com/jobguard/jobguard/internal/safe"
	"github.com/jobguard/jobguard/internal/txstate"
)

// FinalizeSpec says how Finalize completes one execution and what it updates
// afterwards.
type FinalizeSpec struct {
	// Recheck runs right before the completion: "was the video deleted, was
	// the job terminated?". A non-nil error stops Finalize before anything is
	// written; Finalize returns it joined with ErrStopped, and what to do with
	// the job (fail it, leave it) is the caller's decision. Defaults to no
	// re-check.
	Recheck func(ctx context.Context) error
	// Complete runs inside the completion's short transaction, right after
	// the conditional completion succeeded, for writes that must commit with
	// it or not at all. Its error rolls the completion back. Keep it to a few
	// statements; never make external calls in it. Defaults to nothing.
	Complete func(ctx context.Context, tx pgx.Tx) error
	// Updates are the metadata updates (video, asset, content) that run in
	// parallel once the completion has committed. Each runs in its own
	// goroutine with its own context derived from Finalize's ctx, so one
	// failing (or panicking) does not cancel the others. They are not part
	// of the completion's transaction. Names must be unique and non-empty.
	// Defaults to none.
	Updates []Update
	// UpdateTimeout bounds each update's context. An update still running
	// a second after its context ended is abandoned: it fails with
	// ErrAbandoned and Finalize returns without it. Defaults to 0: no bound
	// beyond Finalize's ctx.
	UpdateTimeout time.Duration

	// alongside, set only by package settle (guardlink.FinalizeAlongside),
	// is written by the completion's own statement.
	alongside *guardlink.Alongside
}

// Package settle writes its record in the completion's statement; the
// way in is internal/guardlink, no part of FinalizeSpec's API.
func init() {
	guardlink.FinalizeAlongside = func(spec any, a guardlink.Alongside) any {
		s := spec.(FinalizeSpec)
		s.alongside = &a
		return s
	}
}

// Update is one metadata update of a finalize.
type Update struct {
	// Name identifies the update in errors (UpdateError.Name) and in
	// Finalized.Failed.
	Name string
	// Run performs the update. It must use its own database handle (a pool),
	// not a connection or transaction shared with other updates, since the
	// updates run at the same time.
	Run func(ctx context.Context) error
}

// UpdateError is one failed metadata update of a finalize.
type UpdateError struct {
	Name string
	Err  error
}

func (e *UpdateError) Error() string { return fmt.Sprintf("update %s: %v", e.Name, e.Err) }

// Unwrap returns the update's own error.
func (e *UpdateError) Unwrap() error { return e.Err }

// Finalized is the outcome of Finalize, or of Resume. Only they build one:
// its fields are unexported, the zero value is neither completed nor
// confirmed, and both refuse a caller's transaction, so neither reports a
// completion that has not committed. A Finalized that says Completed is
// proof that the completion committed; one that says Confirmed, that every
// update then succeeded too. Copies say the same, and say it of one
// execution only.
type Finalized struct {
	exec      Execution
	table     string // the guard's TableKey
	completed bool
	rejected  bool
	confirmed bool
	failed    []string
}

// Execution returns the execution that was finalized, its job named by
// its canonical id (Guard.CanonicalID) whatever spelling Finalize or
// Resume was given.
func (f Finalized) Execution() Execution { return f.exec }

// TableKey names the jobs table of the execution's job (Guard.TableKey):
// a job is one job of one table, so whatever keys it outside that table,
// such as usage's ledger, keys it by both. It is "" only in the zero
// value.
func (f Finalized) TableKey() string { return f.table }

// Completed reports whether the conditional completion committed. It stays
// committed whatever the updates did.
func (f Finalized) Completed() bool { return f.completed }

// Rejected reports whether the conditional completion affected zero rows:
// the job was terminal for this execution (reclaimed, finished, superseded
// by a newer generation, gone). Nothing was written and no update ran.
func (f Finalized) Rejected() bool { return f.rejected }

// Confirmed reports whether the completion committed and every metadata
// update succeeded. Only a confirmed finalize may bill usage.
func (f Finalized) Confirmed() bool { return f.confirmed }

// Failed returns the names of the updates that failed, in spec order.
func (f Finalized) Failed() []string { return append([]string(nil), f.failed...) }

// Finalize is the confirmed finalize of a video-style job:
//
//  1. spec.Recheck runs; if it says stop, nothing is written.
//  2. CompleteTx writes COMPLETED only while exec still owns a QUEUED or
//     PROCESSING job, in its own short transaction (with spec.Complete).
//     Zero rows returns a *StateError wrapping ErrJobTerminal, the result is
//     Rejected, and nothing after it runs.
//  3. spec.Updates run in parallel, each with its own context. Finalize
//     waits for all of them before it returns, except one still running a
//     second after its context ended (UpdateTimeout, or ctx): that update
//     fails with ErrAbandoned, and is left to finish on its own.
//
// The result is Confirmed only when the completion was written and every
// update succeeded. When some fail, the returned error joins every failure
// as an *UpdateError; the completion and the successful updates stay, since
// they are separate transactions: re-run the failed updates, do not bill.
// An update that panics, or calls runtime.Goexit, fails like one that
// returned an error: its *UpdateError wraps a *PanicError with the value
// and the stack, the others run to their end, and nothing panics in the
// caller's goroutine.
//
// A commit error leaves the outcome unknown; the result then reports
// neither Completed nor Rejected.
//
// The result names the job by its canonical id (CanonicalID), however
// exec spells it, so whatever is keyed by it later (usage's ledger) keys
// one job once. An id the column cannot hold is refused with
// ErrInvalidJobID before spec.Recheck runs.
//
// Finalize runs a transaction of its own: db is a pool or a connection
// outside any transaction. Given a pgx.Tx, or a connection on which a
// transaction is open, it returns ErrInTransaction before anything runs.
// Inside a caller's transaction the completion would commit only when the
// caller commits, after Finalize has returned: it could not confirm it, and
// an update run before that commit would act on a completion that may never
// happen (or wait, forever, on a row the caller holds). To complete inside
// your own transaction, use CompleteIfActive or CompleteTx with your
// pgx.Tx; they confirm nothing, so nothing can be billed from them.
func (g *Guard) Finalize(ctx context.Context, db DB, exec Execution, spec FinalizeSpec) (Finalized, error) {
	fin, err := g.finalized(db, exec, spec, "finalize")
	if err != nil {
		return fin, err
	}
	exec = fin.exec
	if spec.Recheck != nil {
		if err := spec.Recheck(ctx); err != nil {
			return fin, fmt.Errorf("jobguard: finalize: %w: %w", ErrStopped, err)
		}
	}
	completed := false // fn runs only once the completion has been written
	err = g.completeTx(ctx, db, exec, spec.alongside, func(tx pgx.Tx) error {
		completed = true
		if spec.Complete != nil {
			return spec.Complete(ctx, tx)
		}
		return nil
	})
	if err != nil {
		fin.rejected = !completed && errors.Is(err, ErrJobTerminal)
		return fin, err
	}
	err = fin.confirm(ctx, spec, "finalize")
	return fin, err
}

// finalized checks what Finalize and Resume check before anything runs (db
// is outside any transaction, spec is valid, exec's id can be the
// column's) and returns the result they build on: exec under its
// canonical id, of the guard's table. op names the call in the error.
func (g *Guard) finalized(db DB, exec Execution, spec FinalizeSpec, op string) (Finalized, error) {
	fin := Finalized{exec: exec, table: g.cat.key}
	if s := txstate.Of(db); s != txstate.Own {
		return fin, fmt.Errorf("jobguard: %s: %w: db is %v; pass a pool or a connection outside any transaction", op, ErrInTransaction, s)
	}
	if err := spec.Validate(); err != nil {
		return fin, fmt.Errorf("jobguard: %s: %w", op, err)
	}
	id, err := g.CanonicalID(exec.JobID)
	if err != nil {
		return fin, fmt.Errorf("jobguard: %s: %w", op, err)
	}
	fin.exec.JobID = id
	return fin, nil
}

// confirm records that fin's completion committed, runs spec's updates,
// and confirms fin once every one of them succeeded. op names the call in
// the error.
func (fin *Finalized) confirm(ctx context.Context, spec FinalizeSpec, op string) error {
	fin.completed = true
	errs := runUpdates(ctx, spec.Updates, spec.UpdateTimeout)
	for _, e := range errs {
		var ue *UpdateError
		if errors.As(e, &ue) {
			fin.failed = append(fin.failed, ue.Name)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("jobguard: %s: completed but not confirmed: %w", op, errors.Join(errs...))
	}
	fin.confirmed = true
	return nil
}

// runUpdates runs every update in its own goroutine and waits for all of
// them, each until it returns or until safe.Grace (a second) past the end
// of its context. It returns the failures in spec order: an update's error, a
// panic (or runtime.Goexit) as a *PanicError with its stack, or
// ErrAbandoned. Nothing panics in the caller, whose goroutine may be a
// loop that no one else could recover.
func runUpdates(ctx context.Context, updates []Update, timeout time.Duration) []error {
	results := make([]error, len(updates))
	var wg sync.WaitGroup
	for i, u := range updates {
		wg.Go(func() {
			var uctx context.Context
			var cancel context.CancelFunc
			if timeout > 0 {
				uctx, cancel = context.WithTimeout(ctx, timeout)
			} else {
				uctx, cancel = context.WithCancel(ctx)
			}
			defer cancel()
			if err := safe.Bounded(uctx, safe.Grace, u.Run); err != nil {
				results[i] = &UpdateError{Name: u.Name, Err: err}
			}
		})
	}
	wg.Wait()
	var errs []error
	for _, err := range results {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Validate reports what Finalize refuses in s before anything runs: a
// negative UpdateTimeout, and an update whose Name is empty or used twice,
// or whose Run is nil. The error names the field, as Updates[i].
func (s FinalizeSpec) Validate() error {
	if s.UpdateTimeout < 0 {
		return fmt.Errorf("UpdateTimeout %v is negative", s.UpdateTimeout)
	}
	seen := make(map[string]bool, len(s.Updates))
	for i, u := range s.Updates {
		switch {
		case u.Name == "":
			return fmt.Errorf("Updates[%d]: Name is empty", i)
		case u.Run == nil:
			return fmt.Errorf("Updates[%d] (%s): Run is nil", i, u.Name)
		case seen[u.Name]:
			return fmt.Errorf("Updates[%d]: Name %q is used twice", i, u.Name)
		}
		seen[u.Name] = true
	}
	return nil
}
