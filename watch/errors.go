package watch

import (
	"fmt"

	"github.com/jobguard/jobguard/jobguard"
)

// Via says how a Watcher learned that an execution lost its job.
type Via int

// The ways a Watcher learns of a reclaim.
const (
	// ViaNotice: a reclaim notice for the job, at the execution's
	// generation or a later one, arrived.
	ViaNotice Via = iota + 1
	// ViaHeartbeat: the caller reported a heartbeat (or any conditional
	// write) that affected zero rows, with Watcher.Lost.
	ViaHeartbeat
	// ViaCheck: the periodic check read the row and it no longer belongs to
	// the execution.
	ViaCheck
)

// String returns "notice", "heartbeat" or "check".
func (v Via) String() string {
	switch v {
	case ViaNotice:
		return "notice"
	case ViaHeartbeat:
		return "heartbeat"
	case ViaCheck:
		return "check"
	default:
		return "unknown"
	}
}

// LostError is the cause of a watched context that was cancelled
// because its execution lost the job. Read it with context.Cause. It wraps
// jobguard.ErrJobTerminal, so jobguard.IsPermanent reports true for it: the
// queue must not retry this execution's attempt; unless Requeued, when the
// job went back to the queue for another attempt (it wraps
// jobguard.ErrRequeued then, and the queue must deliver the job again).
type LostError struct {
	// JobID and Generation are the watched execution's.
	JobID      string
	Generation int64
	// Via says how the loss was learned.
	Via Via
	// Seen is the generation the notice named (ViaNotice) or the check read
	// (ViaCheck); 0 otherwise, and on a table without a generation column.
	Seen int64
	// Status is the status the check read; "" when the row was gone, and
	// for the other ways.
	Status string
	// Err is the error reported to Watcher.Lost (ViaHeartbeat); nil
	// otherwise.
	Err error
	// Cancelled is true when an operator cancelled the job
	// (jobguard.Guard.Cancel): its notice said so, or the check or the
	// refused write reported to Watcher.Lost read the cancel's failure
	// reason. The error then says "cancelled", and wraps
	// jobguard.ErrCancelled as well.
	Cancelled bool
	// Requeued is true when the execution lost its job to another attempt
	// of it: the check read the row QUEUED under a newer generation (the
	// reclaimer's rescue of a worker whose lease lapsed, an operator's
	// Retry), or the heartbeat's refusal said so. The job is not finished:
	// the queue must deliver it again. The error then says "sent back to
	// the queue", and wraps jobguard.ErrRequeued as well. A notice does not
	// say which it is: ask jobguard.StartGuard.Requeued.
	Requeued bool
}

// Error says which execution lost its job and how the watcher learned it.
func (e *LostError) Error() string {
	what := "reclaimed"
	switch {
	case e.Cancelled:
		what = "cancelled by an operator"
	case e.Requeued:
		what = "sent back to the queue for another attempt"
	}
	msg := fmt.Sprintf("watch: job %s generation %d was %s", e.JobID, e.Generation, what)
	switch e.Via {
	case ViaNotice:
		return fmt.Sprintf("%s (notice for generation %d)", msg, e.Seen)
	case ViaCheck:
		if e.Status == "" {
			return msg + " (check: no such job)"
		}
		return fmt.Sprintf("%s (check: job is %s at generation %d)", msg, e.Status, e.Seen)
	case ViaHeartbeat:
		return fmt.Sprintf("%s (heartbeat: %v)", msg, e.Err)
	}
	return msg
}

// Unwrap returns jobguard.ErrJobTerminal, jobguard.ErrCancelled when the
// job was cancelled, jobguard.ErrRequeued when it was sent back to the
// queue, and, for ViaHeartbeat, the reported error.
func (e *LostError) Unwrap() []error {
	errs := []error{jobguard.ErrJobTerminal}
	if e.Cancelled {
		errs = append(errs, jobguard.ErrCancelled)
	}
	if e.Requeued && !e.Cancelled {
		errs = append(errs, jobguard.ErrRequeued)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}
