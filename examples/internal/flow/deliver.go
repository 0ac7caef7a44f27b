package flow

import (
	"context"
	"log/slog"

	"github.com/jobguard/jobguard/jobguard"
)

// Deliver is the worker side of a queue: it runs one delivery of a job and
// logs its outcome once, as the queue would act on it. A permanent error
// (jobguard.IsPermanent: reclaimed, terminal for this execution) is a
// refusal the queue must not retry (River: JobCancel, asynq: SkipRetry,
// BullMQ: UnrecoverableError); any other error is retried, a loss to
// another attempt (jobguard.ErrRequeued: the job was rescued from a worker
// that only looked dead) among them, since the job waits in QUEUED for a
// delivery. The error is
// returned for the queue's bookkeeping, already logged.
func Deliver(ctx context.Context, log *slog.Logger, jobType, jobID string, process func(ctx context.Context, jobID string) error) error {
	err := process(ctx, jobID)
	attrs := []any{slog.String("job_id", jobID), slog.String("job_type", jobType)}
	switch {
	case err == nil:
		log.InfoContext(ctx, "worker: job done", attrs...)
	case jobguard.IsPermanent(err):
		log.WarnContext(ctx, "worker: job refused; not retried", append(attrs, slog.Any("error", err))...)
	default:
		log.ErrorContext(ctx, "worker: job failed; the queue retries it", append(attrs, slog.Any("error", err))...)
	}
	return err
}
