package asynqguard

import (
	"errors"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
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

// decide is the rule. err is what the attempt returned (the start's error,
// or the handler's); cause is the cause of the context the handler ran
// under, when it ended.
//
// The handler's own word to asynq (SkipRetry, RevokeTask) stands. An
// execution whose watched context was cancelled because it lost its job is
// refused whatever it returned: it cannot have completed the job, and a
// context error from the handler only echoes the loss. Otherwise a
// permanent error (jobguard.IsPermanent) is refused, and the rest, nil
// and retryable errors, go as they are.
func decide(err, cause error) verdict {
	var lost *watch.LostError
	switch {
	case errors.Is(err, asynq.SkipRetry), errors.Is(err, asynq.RevokeTask):
		return asIs
	case errors.As(cause, &lost):
		return refuse
	case err == nil:
		return asIs
	case jobguard.IsPermanent(err):
		return refuse
	default:
		return asIs
	}
}

// told is the error asynq is given for the attempt: err itself, or, for a
// refusal, the loss (when the context's cause is one) and err, wrapping
// asynq.SkipRetry so that asynq archives the task instead of retrying it.
func told(err, cause error) error {
	if decide(err, cause) == asIs {
		return err
	}
	var lost *watch.LostError
	if errors.As(cause, &lost) {
		switch {
		case err == nil:
			err = lost
		case !errors.Is(err, lost):
			err = fmt.Errorf("%w: %w", lost, err)
		}
	}
	return fmt.Errorf("%w (%w)", err, asynq.SkipRetry)
}
