package jobguard

import (
	"errors"
	"fmt"

	"github.com/jobguard/jobguard/internal/safe"
)

// The errors callers branch on, with errors.Is. The permanent ones (see
// IsPermanent) come wrapped in a type that says more: *StateError,
// *ReclaimedError.
var (
	// ErrOwnerLost is Start's refusal under an Owner whose lease has ended:
	// the reclaimer may already be handing the process's jobs to others, so
	// the process must start nothing more. It wraps the Owner's Err. It is
	// retryable: the job itself is fine, and another process may start it.
	ErrOwnerLost = errors.New("jobguard: the worker process's lease has ended")

	// ErrJobTerminal is returned, wrapped in a *StateError, whenever a
	// conditional write affects zero rows: the job is gone, already
	// terminal, or owned by a newer execution. The caller's execution has
	// lost the job and should stop; retrying cannot help.
	ErrJobTerminal = errors.New("jobguard: job is terminal for this execution")

	// ErrReclaimed is the start guard's refusal, wrapped in a
	// *ReclaimedError: the job was reclaimed for exceeding its runtime
	// limit. It is not retryable.
	ErrReclaimed = errors.New("jobguard: job was reclaimed")

	// ErrCancelled is the start guard's refusal of a job an operator
	// cancelled (Guard.Cancel), wrapped in a *CancelledError. It is not
	// retryable: only Retry undoes a cancel.
	ErrCancelled = errors.New("jobguard: job was cancelled")

	// ErrNotCancellable is returned, wrapped in a *StateError, by Cancel
	// when the job is not QUEUED or PROCESSING (it is COMPLETED or FAILED
	// already, a cancelled job included) or does not exist. Nothing was
	// changed.
	ErrNotCancellable = errors.New("jobguard: job cannot be cancelled")

	// ErrNotRetryable is returned, wrapped in a *StateError, by Retry when
	// the job is not FAILED (or does not exist).
	ErrNotRetryable = errors.New("jobguard: job cannot be retried")

	// ErrGuardUnavailable is the fail-closed start guard's refusal when a
	// lookup (Redis marker, marker table or database reason) failed.
	// Unlike ErrReclaimed it is retryable: the job may well be fine once
	// the lookup works again.
	ErrGuardUnavailable = errors.New("jobguard: start guard lookup failed")

	// ErrInvalidJobID is returned when a job id is empty or does not parse
	// as the id column's type (uuid, or an integer within the column's
	// range: int4 ends at 2147483647). No SQL is sent.
	ErrInvalidJobID = errors.New("jobguard: invalid job id")

	// ErrUnstorable is returned, wrapped with the field and why, when a
	// value a caller gave would be refused by PostgreSQL where the library
	// stores it: text holding U+0000 or bytes that are not UTF-8, or JSON
	// for a jsonb column holding \u0000, half a surrogate pair, or a
	// number beyond numeric's range. It is refused before anything is
	// sent, since the same value would fail every try; IsPermanent
	// reports it.
	ErrUnstorable = errors.New("jobguard: value cannot be stored")

	// ErrInTransaction is returned, saying what the handle is, when a call
	// that needs a transaction of its own is given a handle inside a
	// transaction of its caller's. Nothing is sent to the database.
	// Finalize refuses a pgx.Tx, since what it reports must have
	// committed; CompleteTx, Finalize and usage.Accrue refuse a
	// connection on which a transaction is open that is not passed as its
	// pgx.Tx, since the server would ignore their BEGIN and their COMMIT
	// would commit the caller's transaction.
	ErrInTransaction = errors.New("jobguard: db is inside a transaction")

	// ErrStopped is returned, joined with the re-check's own error, when
	// FinalizeSpec.Recheck says the job must not be completed. Nothing was
	// written.
	ErrStopped = errors.New("jobguard: finalize stopped by re-check")

	// ErrAbandoned is returned, wrapped with its context's cause, for code
	// the library ran under a deadline it documents (a Finalize update's
	// UpdateTimeout) that was still running a moment after its context
	// ended: the library stopped waiting for it and went on, and the code
	// was left to finish on its own; what it returns then is dropped.
	ErrAbandoned = safe.ErrAbandoned

	// ErrGoexit is the Value of a *PanicError whose code called
	// runtime.Goexit instead of returning (a test's t.FailNow, for one).
	ErrGoexit = safe.ErrGoexit
)

// PanicError is a panic recovered from code the library was given to run:
// a Finalize update, a settle handler or increment, a reclaim parent rule,
// notifier or source, a compensator. Wherever such code runs, its panic
// fails that one call as an error would, and the error wraps a *PanicError
// (errors.As) holding the panic's value and the stack of the goroutine that
// panicked. A call to runtime.Goexit is reported the same way, with the
// value ErrGoexit. Error prints the value, never the stack; a PanicError
// whose value is an error unwraps to it.
type PanicError = safe.PanicError

// IsPermanent reports whether a queue must not retry after err: the job is
// terminal for this execution, was reclaimed or cancelled, its id is
// unusable, or a value it was given cannot be stored (ErrUnstorable).
//
// Mapping it onto queues:
//
//	// River: cancel instead of retrying.
//	if jobguard.IsPermanent(err) { return river.JobCancel(err) }
//	// asynq: skip the retry.
//	if jobguard.IsPermanent(err) { return fmt.Errorf("%w: %w", err, asynq.SkipRetry) }
//	// BullMQ (Node.js processors, or a Go worker reporting to one): throw
//	// new UnrecoverableError(message), which moves the job straight to failed.
func IsPermanent(err error) bool {
	return errors.Is(err, ErrJobTerminal) || errors.Is(err, ErrReclaimed) || errors.Is(err, ErrCancelled) ||
		errors.Is(err, ErrInvalidJobID) || errors.Is(err, ErrUnstorable)
}

// Reason says why a conditional write affected zero rows, as far as a read
// right after it could tell.
type Reason int

// The reasons a conditional write can find.
const (
	// ReasonUnknown: the row looked writable again when read after the write
	// (it changed twice in between).
	ReasonUnknown Reason = iota
	// ReasonNotFound: no row has the job id.
	ReasonNotFound
	// ReasonStatus: the row's status is not one the write accepts (for
	// completion: it is COMPLETED or FAILED).
	ReasonStatus
	// ReasonSuperseded: a newer execution owns the job (its generation moved).
	ReasonSuperseded
	// ReasonUnread: the read that would explain the refusal failed (the
	// connection died, the transaction was aborted); the write still
	// affected zero rows, so it is a refusal all the same.
	ReasonUnread
)

// String returns the reason in a word or two, for logs.
func (r Reason) String() string {
	switch r {
	case ReasonNotFound:
		return "not found"
	case ReasonStatus:
		return "status"
	case ReasonSuperseded:
		return "superseded"
	case ReasonUnread:
		return "unread"
	default:
		return "unknown"
	}
}

// StateError is a conditional write that affected zero rows, with what a read
// right after it saw. It wraps ErrJobTerminal (ErrNotRetryable for Retry,
// ErrNotCancellable for Cancel).
type StateError struct {
	Op     Op // the write that was refused: OpComplete, OpFail, OpTouch, ...
	JobID  string
	Reason Reason
	// Status is the status seen, when the row exists.
	Status string
	// Generation is the generation seen; Want is the execution's. Both are 0
	// for a table without a generation column.
	Generation, Want int64
	// FailureReason is the failure reason seen, when the row has one: the
	// refusal of a job an operator cancelled carries Shared.CancelledReason
	// (see Shared.Cancelled), a reclaimed one Shared.ReclaimedReason.
	FailureReason string

	kind error
}

// Error says which write was refused on which job, and why.
func (e *StateError) Error() string {
	var why string
	switch e.Reason {
	case ReasonNotFound:
		why = "no such job"
	case ReasonStatus:
		why = "job is " + e.Status
	case ReasonSuperseded:
		why = fmt.Sprintf("superseded: job is at generation %d, execution has %d", e.Generation, e.Want)
	case ReasonUnread:
		why = "not explained, the job could not be read"
	default:
		why = "job changed concurrently"
	}
	return fmt.Sprintf("%v: %s job %s: %s", e.kind, e.Op, e.JobID, why)
}

// Unwrap returns ErrJobTerminal, or ErrNotRetryable for Retry,
// ErrNotCancellable for Cancel.
func (e *StateError) Unwrap() error { return e.kind }

// ReclaimedError is the start guard's refusal: it wraps ErrReclaimed and says
// which evidence refused the job.
type ReclaimedError struct {
	JobID string
	// Source is "database" (the failure reason) or "marker" (the Redis marker).
	Source string
	// Reason is the recorded failure reason.
	Reason string
	// Generation is the reclaimed generation the marker recorded (0 for the
	// database source).
	Generation int64
}

// Error names the job and the evidence that refused it.
func (e *ReclaimedError) Error() string {
	return fmt.Sprintf("%v: job %s (%s: %q)", ErrReclaimed, e.JobID, e.Source, e.Reason)
}

// Unwrap returns ErrReclaimed.
func (e *ReclaimedError) Unwrap() error { return ErrReclaimed }
