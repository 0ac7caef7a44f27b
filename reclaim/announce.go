package reclaim

import (
	"context"
	"errors"
	"time"

	"github.com/jobguard/jobguard/internal/safe"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/jobguard/marker"
)

// afterCommitTimeout bounds what follows a reclaim's or a rescue's write
// (reading back the rows of a write whose outcome is in doubt, the marker
// write, the notices), which runs even when the sweep's context has ended.
const afterCommitTimeout = 10 * time.Second

// afterCommit returns the context of what follows a write: ctx's values,
// not its end, and afterCommitTimeout.
func afterCommit(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), afterCommitTimeout)
}

// settleReclaims reads back, once the transactions holding them have ended,
// the rows of the jobs of chosen whose reclaim is in doubt (all but those
// known to have committed), and returns those a reclaim failed: FAILED with
// the reclaimed reason, at the generation read. Each was reclaimed after
// the sweep read it, by this sweep's write (or, in the same moment, by
// another reclaimer's, which announces it too: markers and notices are
// idempotent).
func (r *Reclaimer) settleReclaims(ctx context.Context, chosen, committed []jobset.Job) ([]jobset.Job, error) {
	known := make(map[string]bool, len(committed))
	for _, c := range committed {
		known[c.ID] = true
	}
	var ids []string
	for _, c := range chosen {
		if !known[c.ID] {
			ids = append(ids, c.ID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	// Rows another transaction still holds are left out (jobset.ErrHeld):
	// the others are announced all the same.
	rows, err := settled(ctx, r.cfg.Guard, r.cfg.DB, ids)
	if err != nil && !errors.Is(err, jobset.ErrHeld) {
		return nil, err
	}
	failed, shared := r.cfg.Guard.Table().Statuses.Failed, r.cfg.Guard.Shared()
	var out []jobset.Job
	for _, c := range chosen {
		row, found := rows[c.ID]
		if known[c.ID] || !found || row.Status != failed || !shared.Reclaimed(row.FailureReason) || row.Generation != c.Generation {
			continue
		}
		out = append(out, jobset.Job{ID: row.ID, Type: row.Type, Status: failed, Generation: row.Generation, ParentID: row.ParentID})
	}
	return out, err
}

// settled is jobset's Settled within what is left of ctx (the after-commit
// context) but announceReserve, so that a row another transaction holds
// leaves time to the markers and notices of what did commit.
func settled(ctx context.Context, g *jobguard.Guard, db jobguard.DB, ids []string) (map[string]jobset.Job, error) {
	if deadline, ok := ctx.Deadline(); ok {
		left := time.Until(deadline)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, max(left-announceReserve, left/2))
		defer cancel()
	}
	return jobset.New(g).Settled(ctx, db, ids)
}

// announceReserve is the part of the after-commit time a read-back leaves
// to the markers and notices that follow it.
const announceReserve = 2 * time.Second

// settleRescues reads back, once the transactions holding them have ended,
// the rows of the orphans of page whose rescue is in doubt. It returns
// those whose execution has lost its job (the row is at a later generation
// than the one read: the notice is due whoever moved the row on), and,
// among them, those the rescue itself moved (the row carries the rescued
// reason at the next generation), which alone count as rescued.
func (r *Reclaimer) settleRescues(ctx context.Context, page []jobset.Orphan) (lost, rescued []jobset.Orphan, err error) {
	ids := make([]string, len(page))
	for i, o := range page {
		ids[i] = o.ID
	}
	// Rows another transaction still holds are left out (jobset.ErrHeld).
	rows, err := settled(ctx, r.cfg.Guard, r.cfg.DB, ids)
	if err != nil && !errors.Is(err, jobset.ErrHeld) {
		return nil, nil, err
	}
	st, shared := r.cfg.Guard.Table().Statuses, r.cfg.Guard.Shared()
	for _, o := range page {
		row, found := rows[o.ID]
		if !found || row.Generation <= o.Generation {
			continue
		}
		lost = append(lost, o)
		if row.Generation == o.Generation+1 && row.Status == st.Queued && row.FailureReason == shared.RescuedReason {
			rescued = append(rescued, o)
		}
	}
	return lost, rescued, err
}

// announce writes the Redis markers of the reclaimed jobs in one pipelined
// round trip, then publishes their notices. The reclaim has committed: both
// must go out even if the sweep's context has ended (Run shutting down,
// the sweep's deadline), or a redelivered job would be refused by the
// database reason alone and its worker would run on until its next check:
// ctx is the write's afterCommit context.
func (r *Reclaimer) announce(ctx context.Context, reclaimed []jobset.Job, rep *Report, n *notes) {
	if len(reclaimed) == 0 {
		return
	}
	execs := make([]jobguard.Execution, len(reclaimed))
	for i, c := range reclaimed {
		execs[i] = jobguard.Execution{JobID: c.ID, Generation: c.Generation}
	}
	// Markers in Postgres committed with the reclaim, written by its
	// statement (see failUnchanged).
	if r.markers != nil {
		now := r.cfg.Now()
		markers := make([]marker.Marker, len(reclaimed))
		for i, c := range reclaimed {
			markers[i] = marker.Marker{JobID: c.ID, Generation: c.Generation, Reason: r.cfg.Guard.Shared().ReclaimedReason, At: now}
		}
		if err := r.markers.Write(ctx, markers...); err != nil {
			rep.MarkerErrors += countJoined(err, len(markers))
			if n.markerErr == nil {
				n.markerErr = err
			}
		}
	}
	r.publish(ctx, execs, rep, n)
}

// publish sends the notices of executions that lost their job, once that
// has committed, so that the watchers in their processes cancel them.
func (r *Reclaimer) publish(ctx context.Context, execs []jobguard.Execution, rep *Report, n *notes) {
	if r.cfg.Notices == nil || len(execs) == 0 {
		return
	}
	// A notifier that panics, or outlives its context and safe.Grace,
	// loses its notices, as one that fails does.
	if err := safe.Bounded(ctx, safe.Grace, func(ctx context.Context) error {
		return r.cfg.Notices.Publish(ctx, execs...)
	}); err != nil {
		rep.NoticeErrors += len(execs)
		if n.noticeErr == nil {
			n.noticeErr = err
		}
		n.sawPanic(err)
	}
}

// countJoined counts the errors joined in err (marker.RedisStore.Write joins one
// per failed marker), or returns all when it cannot tell.
func countJoined(err error, all int) int {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			if n := len(j.Unwrap()); n > 0 && n <= all {
				return n
			}
			break
		}
	}
	return all
}
