// Package queueguard holds what the queue adapters, riverguard and
// asynqguard, decide alike, so that a delivery means the same on either
// queue: which row of the jobs table it names (RowID), and what the queue
// is told when it ends (Decide). An adapter only translates: its queue's
// bytes in, its queue's own words (river.JobCancel, asynq.SkipRetry) out.
//
// The order of Decide is one: a lost execution first, reported as lost and
// final whatever the worker returned, since the row was reclaimed, cancelled
// by an operator (jobguard.Guard.Cancel) or taken by a newer execution and
// neither a retry nor a completion would be true, unless the row is QUEUED
// again for another attempt (jobguard.ErrRequeued: a rescue, a Retry),
// which the queue must deliver (Again); then success; then the
// worker's own word to its queue, which stands; then a permanent error
// (jobguard.IsPermanent: a cancelled job's refused start, ErrCancelled,
// among them), final; the rest is the queue's to retry. An operator's
// cancel is thus River's JobCancel, asynq's SkipRetry and, for a BullMQ
// processor, an UnrecoverableError.
package queueguard
