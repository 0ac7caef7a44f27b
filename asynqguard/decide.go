package asynqguard

import (
	"errors"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/queueguard"
	"github.com/jobguard/jobguard/jobguard"
)

// verdict is what the middleware makes of an attempt's outcome.
type verdict int

const (
	// asIs: the error goes to asynq as it is (nil included), and asynq
	// decides: done, a retry, or the handler's own asynq.SkipRetry or
	// asynq.RevokeTask.
	asIs verdict = iota
	// refuse: a guard refused the attempt; retrying cannot help, so asynq
	// is told to skip its retries.
	refuse
	// again: the execution lost its job to another attempt of it (the row
	// is QUEUED again: a rescue, an operator's Retry); asynq is given the
	// loss, wrapping jobguard.ErrRequeued, to retry, which IsFailure does
	// not count against the task's MaxRetry.
	again
)

// decide is the rule, queueguard.Decide told in asynq's words, for an
// attempt that started no execution or whose row is not read.
func decide(err, cause error) verdict {
	v, _ := answer(err, cause, nil)
	return v
}

// told is the error asynq is given for such an attempt (see answer).
func told(err, cause error) error {
	_, e := answer(err, cause, nil)
	return e
}

// answer is the rule, queueguard.Decide told in asynq's words, and the
// error asynq is given. err is what the attempt returned (the start's
// error, or the handler's); cause is the cause of the context the handler
// ran under, when it ended; requeued reads whether the row is QUEUED again
// for another attempt, nil when no execution started.
//
// An execution whose watched context was cancelled because it lost its job
// is refused whatever it returned, its own SkipRetry or RevokeTask
// included: it cannot have completed the job, and the loss is what asynq
// archives, with asynq.SkipRetry wrapped so that asynq does not retry it.
// A loss to another attempt is the exception: the row waits in QUEUED, so
// asynq is given the loss to retry, the handler's own word told as text
// only. Otherwise the handler's own word to asynq (SkipRetry, RevokeTask)
// stands, a permanent error (jobguard.IsPermanent) is refused, and the
// rest, nil and retryable errors, go as they are.
func answer(err, cause error, requeued func() bool) (verdict, error) {
	d := queueguard.Decide(err, cause, asynqWord, requeued)
	switch d.Outcome {
	case queueguard.Final:
		return refuse, fmt.Errorf("%w (%w)", d.Err, asynq.SkipRetry)
	case queueguard.Again:
		return again, d.Err
	}
	return asIs, d.Err
}

// asynqWord reports whether err carries a handler's own word to asynq.
func asynqWord(err error) bool {
	return errors.Is(err, asynq.SkipRetry) || errors.Is(err, asynq.RevokeTask)
}

// IsFailure reports whether asynq should count err against a task's
// MaxRetry: every error but a loss to another attempt of the job
// (jobguard.ErrRequeued), which the middleware gives asynq to retry when
// the job's row went back to QUEUED (a rescue of a worker whose lease
// lapsed, an operator's Retry). Set it as asynq.Config.IsFailure, so that
// such losses never use up a task's retries: a task archived with its row
// QUEUED would leave nothing to run the job.
func IsFailure(err error) bool {
	return err != nil && !errors.Is(err, jobguard.ErrRequeued)
}
