package riverguard

import (
	"errors"
	"fmt"

	"github.com/riverqueue/river"

	"github.com/jobguard/jobguard/jobguard"
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

// decide is the middleware's rule. err is what ended the delivery: the
// start guard's refusal or error, or the worker's return. lost is the
// watcher's cause when the execution lost its job while the worker ran, nil
// otherwise. It returns the verdict and the error River is given.
//
// A lost execution is cancelled whatever the worker returned: its row was
// reclaimed or taken by a newer execution before it could complete, so
// neither a retry nor a completed River job would tell the truth. A
// permanent error (jobguard.IsPermanent) is cancelled too, since every
// retry would be refused the same way. Anything else is River's to retry.
func decide(err error, lost *watch.LostError) (verdict, error) {
	var cancelled *river.JobCancelError
	switch {
	case lost != nil && err == nil:
		return cancel, river.JobCancel(lost)
	case lost != nil:
		return cancel, river.JobCancel(fmt.Errorf("%w; the worker returned: %w", lost, err))
	case err == nil:
		return done, nil
	case errors.As(err, &cancelled):
		return cancel, err // the worker cancelled it itself
	case jobguard.IsPermanent(err):
		return cancel, river.JobCancel(err)
	}
	return retry, err
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
