package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/internal/safe"
	"github.com/jobguard/jobguard/jobguard"
)

// IntervalDefault is the least time between two heartbeat writes of one job
// within one process.
const IntervalDefault = 5 * time.Minute

// Config configures a Heartbeat. The zero Config is ready to use.
type Config struct {
	// Interval is the least time between two writes of one job's heartbeat
	// from this process. It should be well below the reclaimer's
	// no-progress threshold. Zero or negative means the default: New returns
	// no error, so it cannot refuse one. Defaults to IntervalDefault.
	Interval time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Logger receives a debug line for each write. Errors are returned, not
	// logged. Defaults to slog.Default().
	Logger *slog.Logger
	// MeterProvider receives jobguard.heartbeat.beats, counted by result
	// (written, throttled, lost, failed). Defaults to nil: no metrics, at no
	// cost.
	MeterProvider metric.MeterProvider
}

// Result says what a Beat did.
type Result int

// The results of a Beat.
const (
	// Failed: nothing was written and the job was not found lost; the error
	// says why. Either the evidence was refused (ErrNoEvidence; the slot is
	// not consumed) or the write failed (a database error, a cancelled
	// context; the slot is consumed all the same). The zero Result.
	Failed Result = iota
	// Written: the job's updated_at moved (and its progress, for Progress
	// evidence on a table with a progress column).
	Written
	// Throttled: the job's slot for this interval is taken, or its write is
	// in flight in another goroutine. Nothing was sent to the database.
	Throttled
	// Lost: the conditional write affected zero rows. The job is no longer
	// this execution's (reclaimed, completed, failed, restarted elsewhere);
	// the error wraps jobguard.ErrJobTerminal. Stop working on it.
	Lost
)

// String returns "written", "throttled", "lost" or "failed".
func (r Result) String() string {
	switch r {
	case Written:
		return "written"
	case Throttled:
		return "throttled"
	case Lost:
		return "lost"
	default:
		return "failed"
	}
}

// Heartbeat moves jobs' updated_at on evidence of progress, at most once per
// interval per job within this process. Create one per process (or per
// guard) with New and share it; it is safe for concurrent use.
type Heartbeat struct {
	guard  *jobguard.Guard
	now    func() time.Time
	base   time.Time
	logger *slog.Logger
	lim    *limiter
	met    *beatMetrics
}

// New returns a Heartbeat writing through guard. A zero or negative
// cfg.Interval means IntervalDefault. New panics if guard is nil, a
// programming error that would otherwise surface at the first write.
func New(guard *jobguard.Guard, cfg Config) *Heartbeat {
	if guard == nil {
		panic("heartbeat: new: guard is nil")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = IntervalDefault
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	// The logger is the caller's code, called right after the state
	// changes it reports: its panic must not undo them.
	cfg.Logger = safe.Logger(cfg.Logger)
	h := &Heartbeat{guard: guard, now: cfg.Now, base: cfg.Now(), logger: cfg.Logger, met: newBeatMetrics(cfg.MeterProvider)}
	h.lim = newLimiter(int64(cfg.Interval), 0)
	return h
}

// Beat offers evidence that exec's job advanced. The first beat of a job in
// an interval claims the job's slot, then runs the guard's conditional write
// (Touch, or TouchProgress for Progress evidence): it moves updated_at only
// while the job is PROCESSING at exec's generation. Every other beat of that
// job in the interval returns Throttled at once, without touching db.
//
// The slot is claimed before the write, so a write that fails, is cancelled
// or affects zero rows still uses up the interval. Two goroutines never have
// a write of the same job in flight: the second sees Throttled. A job has
// one slot however exec spells its id (jobguard.Guard.CanonicalID).
//
// A Lost result comes with an error wrapping jobguard.ErrJobTerminal: the
// worker has lost the job and should stop. A Failed result's error is either
// ErrNoEvidence or the write's error; jobguard.IsPermanent tells whether
// retrying can help.
func (h *Heartbeat) Beat(ctx context.Context, db jobguard.DB, exec jobguard.Execution, ev Evidence) (Result, error) {
	res, err := h.beat(ctx, db, exec, ev)
	h.met.count(ctx, res)
	return res, err
}

// beat is Beat without its metrics.
func (h *Heartbeat) beat(ctx context.Context, db jobguard.DB, exec jobguard.Execution, ev Evidence) (Result, error) {
	if err := ev.validate(); err != nil {
		return Failed, fmt.Errorf("heartbeat: beat: %w", err)
	}
	now := int64(h.now().Sub(h.base))
	// Slots are keyed by the canonical id, so that one job spelled two ways
	// (a uuid in upper case) has one slot. The id as given is tried first:
	// it is the canonical one in the common case, which keeps the throttled
	// path free of parsing.
	if h.lim.throttled(exec.JobID, now) {
		return Throttled, nil
	}
	id, err := h.guard.CanonicalID(exec.JobID)
	if err != nil {
		return Failed, fmt.Errorf("heartbeat: beat: %w", err)
	}
	if h.lim.throttled(id, now) || !h.lim.claim(id, now) {
		return Throttled, nil
	}
	defer h.lim.release(id)
	exec.JobID = id

	if ev.kind == KindProgress {
		err = h.guard.TouchProgress(ctx, db, exec, int(ev.n))
	} else {
		err = h.guard.Touch(ctx, db, exec)
	}
	switch {
	case err == nil:
		h.logger.LogAttrs(ctx, slog.LevelDebug, "heartbeat written",
			slog.String("job_id", exec.JobID), slog.Int64("generation", exec.Generation),
			slog.Any("evidence", ev))
		return Written, nil
	case errors.Is(err, jobguard.ErrJobTerminal):
		return Lost, fmt.Errorf("heartbeat: beat: %w", err)
	default:
		return Failed, fmt.Errorf("heartbeat: beat: %w", err)
	}
}

// Forget drops jobID's slot. Call it when an execution of the job ends in
// this process, so that memory is returned at once and a later execution of
// the same job writes its first beat without waiting out the interval. A
// write in flight is not affected.
func (h *Heartbeat) Forget(jobID string) {
	if id, err := h.guard.CanonicalID(jobID); err == nil {
		h.lim.forget(id)
	}
}

// Len returns how many jobs the limiter holds, for monitoring. Nothing runs
// in the background: stale entries are dropped by later beats that are not
// throttled. Len therefore counts at most the jobs whose slot was claimed in
// about the last two intervals, and the entries of jobs left alone fall away
// once other jobs' beats keep arriving for two intervals. Forget drops an
// entry at once.
func (h *Heartbeat) Len() int { return h.lim.len() }
