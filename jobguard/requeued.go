package jobguard

import (
	"context"
	"fmt"
)

// Requeued reports whether exec lost its job to another attempt of it:
// the row is QUEUED under a newer generation than exec's, as the
// reclaimer's rescue of a worker whose lease lapsed, or an operator's
// Retry, leaves it. The queue must then deliver the job again, though exec
// must stop. A queue adapter asks it when an execution lost its job
// without its error saying how (a watcher's notice); a refused write
// already says so, wrapping ErrRequeued.
//
// It is false for a job that is gone, finished, or running under another
// execution, and always on a table without a generation column, where a
// loss can not be told from another attempt.
func (s *StartGuard) Requeued(ctx context.Context, db DB, exec Execution) (bool, error) {
	g := s.guard
	if !g.Fenced() {
		return false, nil
	}
	id, err := g.idArg(exec.JobID)
	if err != nil {
		return false, fmt.Errorf("jobguard: requeued: %w", err)
	}
	r, found, err := g.inspect(ctx, db, id)
	if err != nil {
		return false, fmt.Errorf("jobguard: requeued: job %s: %w", canonicalID(id), err)
	}
	return found && r.status == g.table.Statuses.Queued && r.generation > exec.Generation, nil
}
