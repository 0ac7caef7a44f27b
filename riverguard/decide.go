package riverguard

import (
	"errors"

	"github.com/riverqueue/river"

	"github.com/jobguard/jobguard/internal/queueguard"
	"github.com/jobguard/jobguard/watch"
)

// verdict is what River is told about one delivery of a guarded job.
type verdict uint8

const (
	// done: nil; River completes the job.
	done verdict = iota + 1
	// retry: the error as it came; River retries the job (or snoozes it,
	// for river.JobSnooze), as it would without the middleware.
	retry
	// cancel: river.JobCancel; River never runs the job again.
	cancel
	// snooze: river.JobSnooze(0); River makes the job available again at
	// once, without counting the lost attempt against its MaxAttempts.
	snooze
)

// decide is the middleware's rule, queueguard.Decide told in River's
// words. err is what ended the delivery: the start guard's refusal or
// error, or the worker's return. lost is the watcher's cause when the
// execution lost its job while the worker ran, nil otherwise. requeued
// reads whether the row is QUEUED again for another attempt; nil when no
// execution started. It returns the verdict, the error River is given,
// and the error the verdict stands for (the loss, for a snooze, which
// River records without one).
//
// A lost execution is cancelled whatever the worker returned, its own
// snooze or cancel included (told as text only: River obeys a snooze
// anywhere in the error): its row was reclaimed or taken by a newer
// execution before it could complete, so neither a retry nor a completed
// River job would tell the truth. A loss to another attempt (the row is
// QUEUED again: a rescue, an operator's Retry) is snoozed instead: the job
// must run again, and River must deliver it. The worker's own
// river.JobCancel or river.JobSnooze otherwise stands. A permanent error
// (jobguard.IsPermanent) is cancelled, since every retry would be refused
// the same way. Anything else is River's to retry.
func decide(err error, lost *watch.LostError, requeued func() bool) (verdict, error, error) {
	var cause error
	if lost != nil {
		cause = lost
	}
	d := queueguard.Decide(err, cause, riverWord, requeued)
	switch {
	case d.Outcome == queueguard.Done:
		return done, nil, nil
	case d.Outcome == queueguard.Again:
		return snooze, river.JobSnooze(0), d.Err
	case d.Outcome == queueguard.Final:
		return cancel, river.JobCancel(d.Err), d.Err
	case errors.As(d.Err, new(*river.JobCancelError)):
		return cancel, d.Err, d.Err // the worker cancelled it itself
	}
	return retry, d.Err, d.Err
}

// riverWord reports whether err carries a worker's own word to River: a
// cancel or a snooze.
func riverWord(err error) bool {
	return errors.As(err, new(*river.JobCancelError)) || errors.As(err, new(*river.JobSnoozeError))
}

// String returns the verdict's name, as log lines carry it.
func (v verdict) String() string {
	switch v {
	case done:
		return "done"
	case retry:
		return "retry"
	case cancel:
		return "cancel"
	case snooze:
		return "snooze"
	}
	return "undecided"
}
