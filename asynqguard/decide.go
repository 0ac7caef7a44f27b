package asynqguard

import (
	"errors"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/queueguard"
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
)

// decide is the rule, queueguard.Decide told in asynq's words. err is what
// the attempt returned (the start's error, or the handler's); cause is the
// cause of the context the handler ran under, when it ended.
//
// An execution whose watched context was cancelled because it lost its job
// is refused whatever it returned, its own SkipRetry or RevokeTask
// included: it cannot have completed the job, and the loss is what asynq
// archives. Otherwise the handler's own word to asynq (SkipRetry,
// RevokeTask) stands, a permanent error (jobguard.IsPermanent) is refused,
// and the rest, nil and retryable errors, go as they are.
func decide(err, cause error) verdict {
	if queueguard.Decide(err, cause, asynqWord).Outcome == queueguard.Final {
		return refuse
	}
	return asIs
}

// asynqWord reports whether err carries a handler's own word to asynq.
func asynqWord(err error) bool {
	return errors.Is(err, asynq.SkipRetry) || errors.Is(err, asynq.RevokeTask)
}

// told is the error asynq is given for the attempt: err itself, or, for a
// refusal, the loss (when the context's cause is one) with what the
// handler returned, wrapping asynq.SkipRetry so that asynq archives the
// task instead of retrying it.
func told(err, cause error) error {
	d := queueguard.Decide(err, cause, asynqWord)
	if d.Outcome != queueguard.Final {
		return d.Err
	}
	return fmt.Errorf("%w (%w)", d.Err, asynq.SkipRetry)
}
