package reclaim

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"
)

// Plan is what one sweep would do, decided and not done.
type Plan struct {
	// Report counts the decisions as a shadow sweep's report does: the jobs
	// a sweep would reclaim are in WouldReclaim, and Reclaimed is zero.
	Report Report
	// Jobs holds every job the source listed, one per row, in the order of
	// the listings, each with its decision. A TableSource lists only the
	// jobs over their type's limit; a queue's source lists every active
	// job, so a plan over a queue holds one entry per active job.
	Jobs []PlannedJob
}

// PlannedJob is one job of a Plan: its decision and the figures it was
// made from.
type PlannedJob struct {
	// ID is the job's id, as the id column prints it.
	ID string
	// Type is the job's type, the key of its limit.
	Type string
	// Generation is the row's generation when the row was read, else the
	// listing's (zero when neither is known).
	Generation int64
	// Decision is what a sweep would do with the job.
	Decision Decision
	// Runtime is how long the job's current attempt has run: from the later
	// of the queue's start and the row's own start. Zero when neither is
	// known.
	Runtime time.Duration
	// Limit is the limit of the job's type; zero when it has none.
	Limit time.Duration
	// StalledFor is how long the row's updated_at has stood still, on the
	// database's clock. Zero when the row was not read (the listing alone
	// settled the decision) or does not exist.
	StalledFor time.Duration
	// NoProgress is the threshold StalledFor is compared with.
	NoProgress time.Duration
	// Err is the source's error, for DecisionSourceError.
	Err error
	// Owner is the lease id of the worker process the job ran under, for
	// DecisionRescue.
	Owner string
	// Mode is the mode of the job's type: a job decided for reclaim whose
	// type is in ModeOff is left alone (Report.Paused), one in ModeShadow
	// is counted and not written (Report.WouldReclaim).
	Mode Mode
	// Braked reports that the job was decided for reclaim and the brake
	// holds it back (Report.Braked, Report.BrakeReason).
	Braked bool
}

// String says the decision and why, in words: "runtime 41m0s > limit
// 30m0s, but progress 2m0s ago: kept as progressing".
func (j PlannedJob) String() string {
	rt, limit, stalled := roundSecond(j.Runtime), roundSecond(j.Limit), roundSecond(j.StalledFor)
	switch j.Decision {
	case DecisionSourceError:
		return fmt.Sprintf("the source could not read it (%v): skipped", j.Err)
	case DecisionUnknownType:
		return fmt.Sprintf("type %q has no limit: never reclaimed", j.Type)
	case DecisionWithinLimit:
		return fmt.Sprintf("runtime %v <= limit %v: within its limit", rt, limit)
	case DecisionNoStartTime:
		return "neither the queue nor the row says when its attempt started: skipped, never guessed"
	case DecisionNotActive:
		return "the row is missing or no longer queued or processing: left alone"
	case DecisionStale:
		return "the listing is of an attempt the row no longer runs (retried, or restarted since): left alone"
	case DecisionProgressing:
		return fmt.Sprintf("runtime %v > limit %v, but progress %v ago (threshold %v): kept as progressing",
			rt, limit, stalled, roundSecond(j.NoProgress))
	case DecisionReclaim:
		why := fmt.Sprintf("runtime %v > limit %v and no progress for %v (threshold %v)",
			rt, limit, stalled, roundSecond(j.NoProgress))
		switch {
		case j.Mode == ModeOff:
			return why + ", but type " + strconv.Quote(j.Type) + " is paused: left alone"
		case j.Mode == ModeShadow:
			return why + ", but type " + strconv.Quote(j.Type) + " is in shadow: counted as would reclaim, not written"
		case j.Braked:
			return why + ", but the brake holds it back: left for a later sweep"
		}
		return why + ": reclaim"
	case DecisionRescue:
		return fmt.Sprintf("rescued: its worker's lease lapsed (owner %s): back to QUEUED, whatever its limit", j.Owner)
	}
	return j.Decision.String()
}

func roundSecond(d time.Duration) time.Duration { return d.Round(time.Second) }

// Plan runs one sweep's decisions and writes nothing: no row, parent,
// marker or notice, whatever Config.Shadow says. It applies the brake's
// caps (a job held back is Braked, counted in Report.Braked), and leaves
// its release (ReleaseBrake) for the next sweep; it neither checks nor
// moves the clocks a sweep compares. It reads what a sweep
// reads (the limits, the source, the rows) and takes no lock, so a row
// another transaction holds is decided like any other. It records no
// metrics and logs no summary; like Sweep it stops at Config.SweepTimeout,
// returning the jobs decided before with the error.
func (r *Reclaimer) Plan(ctx context.Context) (Plan, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.SweepTimeout)
	defer cancel()
	var plan Plan
	p := &pass{dry: true, plan: &plan.Jobs, released: r.released.Load()}
	err := r.run(ctx, p)
	plan.Report = p.rep
	if err != nil {
		return plan, fmt.Errorf("reclaim: plan: %w", err)
	}
	return plan, nil
}

// planned is the PlannedJob of l, decided d under r.
func planned(l ActiveJob, d Decision, r rule) PlannedJob {
	j := PlannedJob{ID: l.ID, Type: l.Type, Generation: l.Generation, Decision: d, NoProgress: r.noProgress, Err: l.Err}
	if r.known {
		j.Limit = r.limit
	}
	var queued, rowStarted bool
	if queued = !l.StartedAt.IsZero(); queued {
		j.Runtime = l.runtime(r.now)
	}
	if row := l.Row; row != nil {
		j.Generation = row.Generation
		if rowStarted = !row.StartedAt.IsZero(); rowStarted {
			// The later start counts: the shorter runtime.
			if rt := row.ReadAt.Sub(row.StartedAt); !queued || rt < j.Runtime {
				j.Runtime = rt
			}
		}
		if !row.UpdatedAt.IsZero() {
			j.StalledFor = row.ReadAt.Sub(row.UpdatedAt)
		}
	}
	return j
}

// wouldReclaim counts and logs a job that a shadow sweep would reclaim.
// A Plan returns the job instead of logging it.
func (r *Reclaimer) wouldReclaim(ctx context.Context, p *pass, l ActiveJob, rl rule) {
	p.rep.WouldReclaim++
	p.rep.WouldReclaimIDs = append(p.rep.WouldReclaimIDs, l.ID)
	if p.plan != nil || !r.log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	j := planned(l, DecisionReclaim, rl)
	r.log.InfoContext(ctx, "reclaim: shadow: would reclaim", "job_id", j.ID, "job_type", j.Type,
		"generation", j.Generation, "runtime", roundSecond(j.Runtime), "limit", j.Limit,
		"stalled_for", roundSecond(j.StalledFor))
}
