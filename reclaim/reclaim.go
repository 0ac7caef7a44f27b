package reclaim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

// Defaults of Config.
const (
	// NoProgressDefault is how long updated_at must have stood still. It is
	// three times the heartbeat's default interval, so a job that beats on
	// schedule is never taken for stalled.
	NoProgressDefault = 15 * time.Minute
	// IntervalDefault is the pause between two sweeps of Run.
	IntervalDefault = time.Minute
	// LeaderKeyDefault is the Postgres advisory lock key that elects Run's
	// leader.
	LeaderKeyDefault int64 = 0x6a6f62_7265636c // "job" "recl"
)

// afterCommitTimeout bounds the marker write and the notices that follow a
// committed reclaim, which run even when the sweep's context has ended.
const afterCommitTimeout = 10 * time.Second

// Config configures a Reclaimer.
type Config struct {
	// Guard maps the jobs table. Required.
	Guard *jobguard.Guard
	// DB reaches the jobs table. Sweeps run on its connections; Run holds
	// the leader lock on a connection of its own, opened with the pool's
	// connection settings. Required.
	DB *pgxpool.Pool
	// Redis receives the reclaim markers. Required.
	Redis jobguard.Redis
	// Source lists the active jobs. Defaults to a TableSource over Guard and
	// DB, which needs the mapping's StartedAtColumn.
	Source Source
	// Limits gives the maximum runtime per job type, read at every sweep.
	// Defaults to TableLimits over DB and the table LimitsTableDefault.
	Limits Limits
	// NoProgress is how long a job's updated_at must have stood still before
	// it may be reclaimed. Defaults to NoProgressDefault (15 minutes).
	NoProgress time.Duration
	// Markers says where markers are written. Its Prefix must match the start
	// guard's StartGuardOptions.Markers.Prefix. Defaults to the MarkerConfig
	// defaults (prefix "jobguard", a TTL of 7 days).
	Markers jobguard.MarkerConfig
	// Reason is written as the failure reason. It must start with the start
	// guard's ReclaimedReason so that the guard recognises it. Defaults to
	// jobguard.ReclaimedReasonDefault.
	Reason string
	// Notices, when set, announces every reclaimed job (id and generation)
	// after the reclaim has committed and its markers are written, so that a
	// watch.Watcher in the worker cancels the execution's context and its
	// external call stops costing money. Use watch.NewPublisher for Redis
	// pub/sub or Postgres LISTEN/NOTIFY. Defaults to nil: no notices.
	Notices watch.Publisher
	// OnReclaim holds the parent rule of each job type, run in the reclaim's
	// transaction for the rows that changed. Defaults to no rules.
	OnReclaim map[string]ParentRule
	// Interval is the pause between two sweeps of Run, and the longest a
	// standby waits before it tries to take over. Defaults to IntervalDefault.
	Interval time.Duration
	// SweepTimeout bounds each sweep: when it passes, the sweep stops where
	// it is (what it committed stands) and returns an error. Defaults to
	// Interval.
	SweepTimeout time.Duration
	// LivenessTimeout bounds each round trip of Run's leader lock:
	// connecting, trying the lock, the leader's check before every sweep,
	// and the unlock on return. A leader whose check fails or times out
	// stops sweeping until it holds the lock again. It is part of the bound
	// on a takeover that Run documents. Defaults to LivenessTimeoutDefault
	// (10 seconds).
	LivenessTimeout time.Duration
	// LeaderKey is the advisory lock key that elects Run's leader; instances
	// sweeping the same table must share it. Advisory locks are per database,
	// not per schema or table: reclaimers of different jobs tables in one
	// database need different keys, or only one of them sweeps. Defaults to
	// LeaderKeyDefault.
	LeaderKey int64
	// Logger receives warnings (unreadable jobs, unknown types, marker
	// failures) and the sweep summaries. Defaults to slog.Default().
	Logger *slog.Logger
	// Now is the clock runtime and progress are measured with. Defaults to
	// time.Now.
	Now func() time.Time
	// MeterProvider receives the sweeps' metrics: jobguard.reclaim.decisions
	// by decision (one per Report counter), jobguard.reclaim.marker_errors
	// and the histogram jobguard.reclaim.sweep.duration. Defaults to nil: no
	// metrics, at no cost.
	MeterProvider metric.MeterProvider
}

// Reclaimer finds jobs that are really stuck and fails them. It is safe for
// concurrent use; concurrent sweeps never reclaim a job twice (the write is
// conditional).
type Reclaimer struct {
	cfg     Config
	markers *jobguard.MarkerStore
	log     *slog.Logger
	met     *sweepMetrics
}

// New validates cfg and fills in its defaults.
func New(cfg Config) (*Reclaimer, error) {
	switch {
	case cfg.Guard == nil:
		return nil, errors.New("reclaim: new: Guard is nil")
	case cfg.DB == nil:
		return nil, errors.New("reclaim: new: DB is nil")
	case cfg.Redis == nil:
		return nil, errors.New("reclaim: new: Redis is nil")
	case cfg.NoProgress < 0:
		return nil, fmt.Errorf("reclaim: new: NoProgress %v is negative", cfg.NoProgress)
	case cfg.Interval < 0:
		return nil, fmt.Errorf("reclaim: new: Interval %v is negative", cfg.Interval)
	case cfg.SweepTimeout < 0:
		return nil, fmt.Errorf("reclaim: new: SweepTimeout %v is negative", cfg.SweepTimeout)
	case cfg.LivenessTimeout < 0:
		return nil, fmt.Errorf("reclaim: new: LivenessTimeout %v is negative", cfg.LivenessTimeout)
	}
	if cfg.Source == nil {
		src, err := NewTableSource(cfg.Guard, cfg.DB)
		if err != nil {
			return nil, fmt.Errorf("reclaim: new: Source: %w", err)
		}
		cfg.Source = src
	}
	if cfg.Limits == nil {
		cfg.Limits = TableLimits{DB: cfg.DB}
	}
	if cfg.NoProgress == 0 {
		cfg.NoProgress = NoProgressDefault
	}
	if cfg.Reason == "" {
		cfg.Reason = jobguard.ReclaimedReasonDefault
	}
	for typ, rule := range cfg.OnReclaim {
		if rule == nil {
			return nil, fmt.Errorf("reclaim: new: OnReclaim[%q] is nil", typ)
		}
	}
	if cfg.Interval == 0 {
		cfg.Interval = IntervalDefault
	}
	if cfg.SweepTimeout == 0 {
		cfg.SweepTimeout = cfg.Interval
	}
	if cfg.LivenessTimeout == 0 {
		cfg.LivenessTimeout = LivenessTimeoutDefault
	}
	if cfg.LeaderKey == 0 {
		cfg.LeaderKey = LeaderKeyDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	markers, err := jobguard.NewMarkerStore(cfg.Redis, cfg.Markers)
	if err != nil {
		return nil, fmt.Errorf("reclaim: new: Markers: %w", err)
	}
	return &Reclaimer{cfg: cfg, markers: markers, log: cfg.Logger, met: newSweepMetrics(cfg.MeterProvider)}, nil
}

// Report counts the decisions of one sweep. Every scanned job lands in
// exactly one of NoStartTime, SourceErrors, UnknownType, WithinLimit,
// NotActive, Progressing, Reclaimed and LostRace.
type Report struct {
	// Scanned is the number of active jobs the source listed.
	Scanned int
	// NoStartTime counts jobs the source has no start time for: skipped.
	NoStartTime int
	// SourceErrors counts jobs the source could not read: skipped.
	SourceErrors int
	// UnknownType counts jobs whose type has no limit: skipped.
	UnknownType int
	// WithinLimit counts jobs whose attempt has not yet run past its limit.
	WithinLimit int
	// NotActive counts jobs over their limit whose row is missing or no
	// longer QUEUED or PROCESSING (finished meanwhile, or never created).
	NotActive int
	// Progressing counts jobs over their limit whose updated_at moved within
	// the no-progress threshold: slow but alive, kept.
	Progressing int
	// Reclaimed counts jobs marked FAILED by this sweep.
	Reclaimed int
	// LostRace counts jobs chosen for reclaim whose row changed before the
	// write (progress, completion, another reclaimer): nothing was written
	// for them, no parent, no marker.
	LostRace int
	// MarkerErrors counts reclaimed jobs whose Redis marker could not be
	// written. The database reason still refuses them at start.
	MarkerErrors int
	// NoticeErrors counts reclaimed jobs whose notice could not be published.
	// Their workers' watchers still find the reclaim at their next check.
	NoticeErrors int
	// ReclaimedIDs lists the reclaimed jobs' ids.
	ReclaimedIDs []string
}

// candidate is a job over its limit, with the type its rule is keyed by.
type candidate struct {
	job     ActiveJob
	runtime time.Duration
}

// Sweep runs one pass: it reads the limits and the source, picks the jobs
// over their limit, reads their rows in one query, keeps those whose
// updated_at has not moved for NoProgress, and fails them all in one
// conditional UPDATE that matches each row on the status, updated_at and
// generation it was read with. In the same transaction it runs the parent
// rules for the rows that changed; after the commit it writes their markers
// in one pipelined round trip.
//
// Without parent rules the UPDATE runs on its own, so a sweep takes three
// database round trips whatever the number of jobs: the limits, the rows
// (read by TableSource with the start times, else by one query for the jobs
// over their limit), and the write. Parent rules add the transaction's BEGIN
// and COMMIT and what each rule sends (SetParent: one statement per type).
//
// The error is non-nil when the limits or the source cannot be read, or
// when the read or the write of the rows fails; nothing was reclaimed then.
// Per-job problems are logged and counted, not returned.
func (r *Reclaimer) Sweep(ctx context.Context) (Report, error) {
	// The duration is real elapsed time, whatever clock Config.Now is.
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.SweepTimeout)
	defer cancel()
	rep, err := r.sweep(ctx)
	r.met.swept(ctx, rep, err, time.Since(start))
	return rep, err
}

// sweep is Sweep without its metrics.
func (r *Reclaimer) sweep(ctx context.Context) (Report, error) {
	var rep Report
	limits, err := r.cfg.Limits.Limits(ctx)
	if err != nil {
		return rep, fmt.Errorf("reclaim: sweep: %w", err)
	}
	jobs, err := r.cfg.Source.Active(ctx)
	if err != nil {
		return rep, fmt.Errorf("reclaim: sweep: source: %w", err)
	}
	now := r.cfg.Now()

	cands := map[string]candidate{}
	var ids []string
	unknown := map[string]int{}
	listed := make(map[string]bool, len(jobs))
	for _, j := range jobs {
		if listed[j.ID] {
			continue // listed twice: decide once
		}
		listed[j.ID] = true
		rep.Scanned++
		limit, known := limits[j.Type]
		switch {
		case j.Err != nil:
			rep.SourceErrors++
			r.log.WarnContext(ctx, "reclaim: cannot read active job; skipped",
				slog.String("job_id", j.ID), slog.String("job_type", j.Type), slog.Any("error", j.Err))
		case j.StartedAt.IsZero():
			rep.NoStartTime++
		case !known:
			rep.UnknownType++
			unknown[j.Type]++
		case now.Sub(j.StartedAt) <= limit:
			rep.WithinLimit++
		default:
			cands[j.ID] = candidate{job: j, runtime: now.Sub(j.StartedAt)}
			ids = append(ids, j.ID)
		}
	}
	for typ, n := range unknown {
		r.log.WarnContext(ctx, "reclaim: job type has no runtime limit; its jobs are skipped",
			slog.String("job_type", typ), slog.Int("jobs", n))
	}
	if len(ids) == 0 {
		return rep, nil
	}

	var unread []string
	for _, id := range ids {
		if cands[id].job.Row == nil {
			unread = append(unread, id)
		}
	}
	rows := map[string]jobguard.JobState{}
	if len(unread) > 0 {
		if rows, err = r.cfg.Guard.Snapshot(ctx, r.cfg.DB, unread); err != nil {
			return rep, fmt.Errorf("reclaim: sweep: %w", err)
		}
	}
	for _, id := range ids {
		if row := cands[id].job.Row; row != nil {
			rows[id] = *row
		}
	}
	st := r.cfg.Guard.Table().Statuses
	var expected []jobguard.JobState
	var inactive []string
	typeOf := map[string]string{}         // row id → the type its limit and rule are keyed by
	runtime := map[string]time.Duration{} // row id → runtime of the current attempt
	for _, id := range ids {
		row, found := rows[id]
		switch {
		case !found || (row.Status != st.Queued && row.Status != st.Processing):
			rep.NotActive++
			inactive = append(inactive, id)
		case now.Sub(row.UpdatedAt) < r.cfg.NoProgress:
			rep.Progressing++
		default:
			expected = append(expected, row)
			typeOf[row.ID] = cands[id].job.Type
			runtime[row.ID] = cands[id].runtime
		}
	}
	if len(inactive) > 0 {
		// The queue still runs jobs whose rows are gone or finished: a worker
		// hung after its last write, or a job that maps to no row.
		r.log.WarnContext(ctx, "reclaim: jobs over their limit have no active row; left alone",
			slog.Int("jobs", len(inactive)), slog.Any("job_ids", inactive[:min(len(inactive), 20)]))
	}
	if len(expected) == 0 {
		return rep, nil
	}

	changed, err := r.reclaim(ctx, expected, typeOf)
	if err != nil {
		return rep, fmt.Errorf("reclaim: sweep: %w", err)
	}
	rep.Reclaimed = len(changed)
	rep.LostRace = len(expected) - len(changed)
	markers := make([]jobguard.Marker, len(changed))
	won := map[string]bool{}
	for i, c := range changed {
		rep.ReclaimedIDs = append(rep.ReclaimedIDs, c.ID)
		won[c.ID] = true
		markers[i] = jobguard.Marker{JobID: c.ID, Generation: c.Generation, Reason: r.cfg.Reason, At: now}
		r.log.InfoContext(ctx, "reclaim: job reclaimed",
			slog.String("job_id", c.ID), slog.String("job_type", typeOf[c.ID]),
			slog.Duration("runtime", runtime[c.ID]), slog.Int64("generation", c.Generation),
			slog.String("parent_id", c.ParentID), slog.String("reason", r.cfg.Reason))
	}
	for _, e := range expected {
		if !won[e.ID] {
			r.log.InfoContext(ctx, "reclaim: job changed before the write; left alone",
				slog.String("job_id", e.ID), slog.String("job_type", typeOf[e.ID]), slog.Int64("generation", e.Generation))
		}
	}
	// The reclaim has committed: its markers and notices must go out even if
	// the caller is shutting down (Run's context ended mid-sweep), or a
	// redelivered job would be refused by the database reason alone.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), afterCommitTimeout)
	defer cancel()
	if err := r.markers.Write(ctx, markers...); err != nil {
		rep.MarkerErrors = countJoined(err, len(markers))
		r.log.WarnContext(ctx, "reclaim: cannot write reclaim markers; the database reason still refuses the jobs",
			slog.Int("failed", rep.MarkerErrors), slog.Any("error", err))
	}
	if r.cfg.Notices != nil && len(changed) > 0 {
		if err := r.cfg.Notices.Publish(ctx, watch.NoticesFrom(changed)...); err != nil {
			rep.NoticeErrors = len(changed)
			r.log.WarnContext(ctx, "reclaim: cannot publish reclaim notices; watchers find the reclaims at their next check",
				slog.Int("failed", rep.NoticeErrors), slog.Any("error", err))
		}
	}
	return rep, nil
}

// reclaim fails the expected rows that are unchanged and runs the parent
// rules for them in the same transaction.
func (r *Reclaimer) reclaim(ctx context.Context, expected []jobguard.JobState, typeOf map[string]string) ([]jobguard.JobState, error) {
	g := r.cfg.Guard
	if len(r.cfg.OnReclaim) == 0 {
		return g.FailIfUnchanged(ctx, r.cfg.DB, expected, r.cfg.Reason)
	}
	var changed []jobguard.JobState
	err := pgx.BeginFunc(ctx, r.cfg.DB, func(tx pgx.Tx) error {
		var err error
		changed, err = g.FailIfUnchanged(ctx, tx, expected, r.cfg.Reason)
		if err != nil {
			return err
		}
		byType := map[string][]jobguard.JobState{}
		for i := range changed {
			typ := typeOf[changed[i].ID]
			if changed[i].Type == "" {
				changed[i].Type = typ
			}
			byType[typ] = append(byType[typ], changed[i])
		}
		types := make([]string, 0, len(byType))
		for typ := range byType {
			types = append(types, typ)
		}
		slices.Sort(types) // the same order in every sweep
		for _, typ := range types {
			rule := r.cfg.OnReclaim[typ]
			if rule == nil {
				continue
			}
			if err := rule(ctx, tx, byType[typ]); err != nil {
				return fmt.Errorf("OnReclaim[%q]: %w", typ, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return changed, nil
}

// countJoined counts the errors joined in err (MarkerStore.Write joins one
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
