package queueguard

import (
	"errors"
	"fmt"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

// Outcome is what a queue is told of one delivery of a guarded job.
type Outcome uint8

const (
	// Done: the worker returned nil and kept its job; the queue completes
	// the delivery.
	Done Outcome = iota + 1
	// AsIs: the error goes to the queue as it came, and the queue decides:
	// a retry, or the worker's own word (a River snooze or cancel, an asynq
	// SkipRetry or RevokeTask).
	AsIs
	// Final: the queue must never run the job again; the adapter tells it
	// so in its own word around Decision.Err.
	Final
	// Again: the execution lost its job, but to another attempt of it: the
	// row is QUEUED again (jobguard.ErrRequeued: the reclaimer's rescue of
	// a worker whose lease lapsed, an operator's Retry). The queue must
	// deliver the job again, and not count the lost execution as a failed
	// try where it can (River: a snooze; asynq: a retry its IsFailure does
	// not count), or the row would wait in QUEUED with nothing to run it.
	// The next delivery is judged by the start guard like any other.
	Again
)

// String returns the outcome's name, as log lines carry it.
func (o Outcome) String() string {
	switch o {
	case Done:
		return "done"
	case AsIs:
		return "as_is"
	case Final:
		return "final"
	case Again:
		return "again"
	}
	return "undecided"
}

// Decision is Decide's answer.
type Decision struct {
	// Outcome is what the queue is told.
	Outcome Outcome
	// Err is the error it is told with: nil for Done, the worker's error
	// for AsIs, and for Final the permanent error or, when the execution
	// was lost, the loss wrapping what the worker returned. For Again it
	// is the loss, wrapping jobguard.ErrRequeued.
	Err error
	// Lost is the watcher's cause when the execution lost its job while
	// the worker ran, nil otherwise.
	Lost *watch.LostError
}

// Decide is the rule of both adapters. err is what ended the delivery: the
// start's refusal or error, or the worker's return. cause is the cause of
// the context the worker ran under (context.Cause), read before the watch
// is released; nil without a watcher. word reports whether an error
// carries the worker's own word to its queue (River: a snooze or a cancel;
// asynq: SkipRetry, RevokeTask). requeued reports whether the execution's
// row is QUEUED again under a newer generation
// (jobguard.StartGuard.Requeued); it is asked only of a loss whose error
// does not say, and is nil when no execution started.
//
// A lost execution is Final whatever the worker returned, its own word
// included: the loss is what the queue records. The word is then told only
// as text, not wrapped, since a queue obeys a word anywhere in the chain
// (River snoozes before it cancels, asynq revokes before it archives) and
// would otherwise run the lost job again, or drop it as done. The one
// exception is a loss to another attempt of the job, an operator's cancel
// never: the row waits in QUEUED for a delivery, so the loss is Again.
func Decide(err, cause error, word func(error) bool, requeued func() bool) Decision {
	var lost *watch.LostError
	switch {
	case errors.As(cause, &lost):
		told := lostError(lost, err, word)
		if !lost.Cancelled && (errors.Is(told, jobguard.ErrRequeued) || ask(requeued)) {
			return Decision{Outcome: Again, Err: requeuedError(told), Lost: lost}
		}
		return Decision{Outcome: Final, Err: told, Lost: lost}
	case err == nil:
		return Decision{Outcome: Done}
	case word(err):
		return Decision{Outcome: AsIs, Err: err}
	case errors.Is(err, jobguard.ErrRequeued) && !jobguard.IsPermanent(err):
		return Decision{Outcome: Again, Err: err}
	case jobguard.IsPermanent(err):
		if lostUnexplained(err) && ask(requeued) {
			return Decision{Outcome: Again, Err: requeuedError(err)}
		}
		return Decision{Outcome: Final, Err: err}
	}
	return Decision{Outcome: AsIs, Err: err}
}

// ask asks requeued, if there is one.
func ask(requeued func() bool) bool { return requeued != nil && requeued() }

// lostUnexplained reports whether err is a refused write of the execution
// that does not say whether the job went back for another attempt: it
// wraps jobguard.ErrJobTerminal alone, with no cancel or reclaim.
func lostUnexplained(err error) bool {
	return errors.Is(err, jobguard.ErrJobTerminal) && !errors.Is(err, jobguard.ErrCancelled) &&
		!errors.Is(err, jobguard.ErrReclaimed)
}

// requeuedError is err, wrapping jobguard.ErrRequeued.
func requeuedError(err error) error {
	if errors.Is(err, jobguard.ErrRequeued) {
		return err
	}
	return fmt.Errorf("%w (%w)", err, jobguard.ErrRequeued)
}

// lostError is the loss, with what the worker returned after it.
func lostError(lost *watch.LostError, err error, word func(error) bool) error {
	switch {
	case err == nil:
		return lost
	case word(err):
		return fmt.Errorf("%w; the worker returned: %s", lost, err)
	case errors.Is(err, lost):
		return err // the worker handed the loss back
	}
	return fmt.Errorf("%w; the worker returned: %w", lost, err)
}
