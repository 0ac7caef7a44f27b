package reclaim

import (
	"time"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
)

// Decision is what a sweep does with one job. Every listed job gets exactly
// one; each has its own Report counter, and its String is the decision's
// name in log lines and metric labels.
type Decision uint8

const (
	// DecisionSourceError: the source could not read the job. Skipped.
	DecisionSourceError Decision = iota + 1
	// DecisionUnknownType: the job's type has no limit. Skipped.
	DecisionUnknownType
	// DecisionWithinLimit: the current attempt has not run past its limit.
	DecisionWithinLimit
	// DecisionNoStartTime: neither the queue nor the row knows when the
	// current attempt started. Skipped, never guessed.
	DecisionNoStartTime
	// DecisionNotActive: the row is missing or finished.
	DecisionNotActive
	// DecisionStale: the listing is of an attempt the row no longer runs
	// (the row was retried, or restarted since). Never acted on.
	DecisionStale
	// DecisionProgressing: over the limit, but updated_at moved within the
	// no-progress threshold. Slow but alive: kept.
	DecisionProgressing
	// DecisionReclaim: over the limit and no progress. The job is failed, if
	// its row is still as read when the write comes (a shadow sweep and Plan
	// only count it).
	DecisionReclaim
	// DecisionRescue: the job runs under an owner whose lease is not live
	// (its worker process died, was stopped or cut off): it goes back to
	// QUEUED under a new generation, whatever its limit (Config.Workers).
	// Its outcomes are counted apart, as the reclaim's are.
	DecisionRescue
)

// rule is what decide needs besides the job: the limit of the job's type
// and the two clocks.
type rule struct {
	// limit is the job type's limit; known is false when it has none.
	limit time.Duration
	known bool
	// now is the reclaimer's clock, which a queue's start times are measured
	// with.
	now time.Time
	// noProgress is how long updated_at must have stood still.
	noProgress time.Duration
}

// screen decides what the listing alone settles, before any row is read. It
// reports false when the decision needs the row. A queue start within the
// limit settles it: the current attempt started no earlier than the latest
// listing, so it is within its limit too.
func screen(l ActiveJob, r rule) (Decision, bool) {
	switch {
	case l.Err != nil:
		return DecisionSourceError, true
	case !r.known:
		return DecisionUnknownType, true
	case !l.StartedAt.IsZero() && l.runtime(r.now) <= r.limit:
		return DecisionWithinLimit, true
	}
	return 0, false
}

// decide is the reclaim rule for one job: l is its listing (several
// listings of one row merged by mergeListings), row its row, nil when the
// table has none.
//
// The runtime is the current attempt's: of the queue's start (measured on
// the queue's clock when the listing read it, else on the reclaimer's) and
// the row's own start column (on the database's clock, as ReadAt minus
// StartedAt), the later start, that is the shorter runtime, counts. A
// QUEUED row runs no attempt, and a row whose generation is past the
// listing's has moved on: a listing of either is stale. Progress is
// compared on the database's clock only (ReadAt minus UpdatedAt), so a
// reclaimer whose clock runs ahead cannot take a beating job for stalled.
func decide(l ActiveJob, row *jobset.Job, r rule, st jobguard.Statuses) Decision {
	if d, ok := screen(l, r); ok {
		return d
	}
	switch {
	case row == nil || (row.Status != st.Queued && row.Status != st.Processing):
		return DecisionNotActive
	case row.Status == st.Queued:
		return DecisionStale
	case l.Generation != 0 && row.Generation > l.Generation:
		return DecisionStale
	}
	queued, rowStarted := !l.StartedAt.IsZero(), !row.StartedAt.IsZero()
	switch {
	case !queued && !rowStarted:
		return DecisionNoStartTime
	case rowStarted && row.ReadAt.Sub(row.StartedAt) <= r.limit:
		if queued {
			// The queue's listing is over the limit, the row's attempt is
			// not: the listing is of an earlier attempt.
			return DecisionStale
		}
		return DecisionWithinLimit
	case row.ReadAt.Sub(row.UpdatedAt) < r.noProgress:
		return DecisionProgressing
	}
	return DecisionReclaim
}

// mergeListings folds a second listing of the same row into the first: the
// latest start and the highest generation are the current attempt's. A
// listing that could not be read gives way to one that could.
func mergeListings(a, b ActiveJob) ActiveJob {
	switch {
	case b.Err != nil:
		return a
	case a.Err != nil:
		return b
	}
	if b.StartedAt.After(a.StartedAt) {
		a.StartedAt, a.ReadAt, a.Type = b.StartedAt, b.ReadAt, b.Type
	}
	a.Generation = max(a.Generation, b.Generation)
	if a.Row == nil {
		a.Row = b.Row
	}
	return a
}

// String returns the decision's name, as log lines and metric labels carry
// it: its counter's label (tallies), and "reclaim" for the decision whose
// outcomes are counted apart.
func (d Decision) String() string {
	switch d {
	case DecisionReclaim:
		return "reclaim"
	case DecisionRescue:
		return "rescue"
	}
	if t, ok := decisionTally[d]; ok {
		return t.label
	}
	return "undecided"
}
