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
)

// decide is the middleware's rule, queueguard.Decide told in River's
// words. err is what ended the delivery: the start guard's refusal or
// error, or the worker's return. lost is the watcher's cause when the
// execution lost its job while the worker ran, nil otherwise. It returns
// the verdict and the error River is given.
//
// A lost execution is cancelled whatever the worker returned, its own
// snooze or cancel included (told as text only: River obeys a snooze
// anywhere in the error): its row was reclaimed or taken by a newer
// execution before it could complete, so neither a retry nor a completed
// River job would tell the truth. The worker's own river.JobCancel or
// river.JobSnooze otherwise stands. A permanent error (jobguard.IsPermanent)
// is cancelled, since every retry would be refused the same way. Anything
// else is River's to retry.
func decide(err error, lost *watch.LostError) (verdict, error) {
	var cause error
	if lost != nil {
		cause = lost
	}
	d := queueguard.Decide(err, cause, riverWord)
	switch {
	case d.Outcome == queueguard.Done:
		return done, nil
	case d.Outcome == queueguard.Final:
		return cancel, river.JobCancel(d.Err)
	case errors.As(d.Err, new(*river.JobCancelError)):
		return cancel, d.Err // the worker cancelled it itself
	}
	return retry, d.Err
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
	}
	return "undecided"
}
