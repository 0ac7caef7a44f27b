package jobguard

import "slices"

// whyRefused says why a job's row refuses the write w of an execution at
// generation want, from a read of the row right after: r, found false
// when no row has the id, readErr when the read failed. It is the one
// place that works out a refusal; the guarded writes, Start and Resume
// all call it.
//
// The result wraps kind. Its Reason is ReasonUnknown when the row as read
// would take w: for a write that matched no row, the row changed twice in
// between; for Resume, which writes nothing, the completion it looks for.
func whyRefused(w guarded, jobID string, want int64, kind error, r row, found bool, readErr error) *StateError {
	e := &StateError{Op: w.op, JobID: jobID, Want: want, kind: kind}
	switch {
	case readErr != nil:
		e.Reason = ReasonUnread
		return e
	case !found:
		e.Reason = ReasonNotFound
		return e
	case w.fenced && r.generation != want:
		e.Reason = ReasonSuperseded
	case !slices.Contains(w.allowed, r.status):
		e.Reason = ReasonStatus
	}
	e.Status, e.Generation, e.FailureReason = r.status, r.generation, r.reason
	return e
}
