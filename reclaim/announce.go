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

// afterCommitTimeout bounds the marker write and the notices that follow a
// committed reclaim, which run even when the sweep's context has ended.
const afterCommitTimeout = 10 * time.Second

// announce writes the Redis markers of the reclaimed jobs in one pipelined
// round trip, then publishes their notices. The reclaim has committed: both must
// go out even if the sweep's context has ended (Run shutting down, the
// sweep's deadline), or a redelivered job would be refused by the database
// reason alone and its worker would run on until its next check.
func (r *Reclaimer) announce(ctx context.Context, reclaimed []jobset.Job, rep *Report, n *notes) {
	if len(reclaimed) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), afterCommitTimeout)
	defer cancel()
	execs := make([]jobguard.Execution, len(reclaimed))
	for i, c := range reclaimed {
		execs[i] = jobguard.Execution{JobID: c.ID, Generation: c.Generation}
	}
	// Markers in Postgres committed with the reclaim (see mark).
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
