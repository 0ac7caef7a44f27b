package watch

import (
	"context"
	"fmt"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
)

// verdict is what a check makes of one watched execution and its row.
type verdict int

const (
	// owned: the row still belongs to the execution; keep watching.
	owned verdict = iota
	// ended: the execution ended its job itself (completed it, or failed it
	// for a reason of its own). Nothing was taken from it, so nothing is
	// cancelled; it just needs no more watching.
	ended
	// lost: the job was taken from the execution (reclaimed, restarted,
	// deleted); cancel it.
	lost
)

// rules are what judge needs to know of the table.
type rules struct {
	fenced   bool
	statuses jobguard.Statuses
	shared   jobguard.Shared // says which failure reasons are a reclaim's or a cancel's
}

// judge decides what the row (found or not) says of exec.
//
// On a fenced table a row at another generation belongs to another
// execution, whatever its status. At the execution's own generation only
// the execution itself or a reclaim can have moved it on: COMPLETED is the
// execution's own completion, and FAILED its own Fail unless the failure
// reason is the reclaimer's, since a reclaim keeps the generation too.
// Without a generation column the status and the reason are all there is to
// go on, so a COMPLETED row is taken as the execution's own, and a FAILED
// one whose reason is an operator's cancel (which bumps the generation on
// a fenced table) as lost.
func judge(r rules, exec jobguard.Execution, row jobset.Job, found bool) verdict {
	switch {
	case !found:
		return lost
	case r.fenced && row.Generation != exec.Generation:
		return lost
	case row.Status == r.statuses.Processing:
		return owned
	case row.Status == r.statuses.Completed:
		return ended
	case row.Status == r.statuses.Failed && !r.shared.Reclaimed(row.FailureReason) && !r.shared.Cancelled(row.FailureReason):
		return ended
	}
	return lost
}

// Check reads the rows of every watched execution in one query and cancels
// the executions that lost their job: the row is gone, at another
// generation (on a fenced table), FAILED by a reclaim or a cancel, or back
// in QUEUED. An execution that ended its job itself (COMPLETED, or FAILED
// with a reason that is neither the reclaimer's nor a cancel's, at its own
// generation) is not cancelled, only no longer watched. It returns how many it cancelled. Run calls it every
// CheckInterval and after each (re)subscription; call it yourself only to
// check at a moment of your own.
func (w *Watcher) Check(ctx context.Context) (int, error) {
	w.mu.Lock()
	var all []*entry
	ids := make([]string, 0, len(w.jobs))
	for id, set := range w.jobs {
		ids = append(ids, id)
		for e := range set {
			all = append(all, e)
		}
	}
	w.mu.Unlock()
	if len(all) == 0 {
		return 0, nil
	}
	// Only executions registered before the read are judged by it: one
	// watched after the query began may be newer than the row it saw.
	rows, err := jobset.New(w.cfg.Guard).Snapshot(ctx, w.cfg.DB, ids)
	if err != nil {
		return 0, fmt.Errorf("watch: check: %w", err)
	}
	n := 0
	for _, e := range all {
		row, found := rows[e.key]
		switch judge(w.rules, e.exec, row, found) {
		case owned:
		case ended:
			w.take(e)
		case lost:
			cause := &LostError{JobID: e.exec.JobID, Generation: e.exec.Generation, Via: ViaCheck}
			if found {
				cause.Status, cause.Seen = row.Status, row.Generation
				cause.Cancelled = w.rules.shared.Cancelled(row.FailureReason)
				cause.Requeued = w.rules.fenced && row.Status == w.rules.statuses.Queued && row.Generation > e.exec.Generation
			}
			if w.take(e) {
				w.fire(ctx, e, cause)
				n++
			}
		}
	}
	return n, nil
}
