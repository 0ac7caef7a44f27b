// Package queueguard holds what the queue adapters, riverguard and
// asynqguard, decide alike, so that a delivery means the same on either
// queue: which row of the jobs table it names (RowID), and what the queue
// is told when it ends (Decide). An adapter only translates: its queue's
// bytes in, its queue's own words (river.JobCancel, asynq.SkipRetry) out.
//
// The order of Decide is one: a lost execution first, reported as lost and
// final whatever the worker returned, since the row was reclaimed or taken
// by a newer execution and neither a retry nor a completion would be true;
// then success; then the worker's own word to its queue, which stands; then
// a permanent error (jobguard.IsPermanent), final; the rest is the queue's
// to retry.
package queueguard
