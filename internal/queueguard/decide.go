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
	}
	return "undecided"
}

// Decision is Decide's answer.
type Decision struct {
	// Outcome is what the queue is told.
	Outcome Outcome
	// Err is the error it is told with: nil for Done, the worker's error
	// for AsIs, and for Final the permanent error or, when the execution
	// was lost, the loss wrapping what the worker returned.
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
// asynq: SkipRetry, RevokeTask).
//
// A lost execution is Final whatever the worker returned, its own word
// included: the loss is what the queue records. The word is then told only
// as text, not wrapped, since a queue obeys a word anywhere in the chain
// (River snoozes before it cancels, asynq revokes before it archives) and
// would otherwise run the lost job again, or drop it as done.
func Decide(err, cause error, word func(error) bool) Decision {
	var lost *watch.LostError
	switch {
	case errors.As(cause, &lost):
		return Decision{Outcome: Final, Err: lostError(lost, err, word), Lost: lost}
	case err == nil:
		return Decision{Outcome: Done}
	case word(err):
		return Decision{Outcome: AsIs, Err: err}
	case jobguard.IsPermanent(err):
		return Decision{Outcome: Final, Err: err}
	}
	return Decision{Outcome: AsIs, Err: err}
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
