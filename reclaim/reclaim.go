package reclaim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/internal/interval"
	"github.com/jobguard/jobguard/internal/safe"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/lease"
)

// Defaults of Config.
const (
	// NoProgressDefault is how long updated_at must have stood still. It is
	// three times the heartbeat's default interval, so a job that beats on
	// schedule is never taken for stalled.
	NoProgressDefault = 15 * time.Minute
	// IntervalDefault is the pause between two sweeps of Run.
	IntervalDefault = time.Minute
	// PageSizeDefault is how many listings a sweep takes from its source at
	// a time: one read of rows and one write per page.
	PageSizeDefault = 10_000
)

// Config configures a Reclaimer.
type Config struct {
	// Guard maps the jobs table. Required.
	Guard *jobguard.Guard
	// DB reaches the jobs table. Sweeps run on its connections; Run holds
	// the leader lock on a connection of its own, opened with the pool's
	// connection settings. Required.
	DB *pgxpool.Pool
	// Redis receives the reclaim markers when Guard's Shared.Markers is
	// MarkersRedis, and is required then. With MarkersPostgres (the
	// default) the markers are written to the marker table in the
	// reclaim's own transaction, and Redis is not used: leave it nil.
	Redis marker.Redis
	// Source lists the active jobs. Defaults to a TableSource over Guard and
	// DB, which needs the mapping's StartedAtColumn.
	Source Source
	// Limits gives the maximum runtime per job type, read at every sweep.
	// Defaults to a TableLimits over DB and the table LimitsTableDefault.
	Limits Limits
	// PageSize is how many listings a sweep takes from its source at a time,
	// which bounds its memory whatever the number of active jobs. Defaults
	// to PageSizeDefault.
	PageSize int
	// NoProgress is how long a job's updated_at must have stood still before
	// it may be reclaimed. Defaults to NoProgressDefault (15 minutes).
	NoProgress time.Duration
	// Markers configures the markers written (their TTL). Their prefix, and
	// the failure reason written, are Guard's Shared settings, which the
	// start guards and watchers read. Defaults to the marker.Config defaults
	// (a TTL of 7 days).
	Markers marker.Config
	// Notices, when set, announces every reclaimed execution after the
	// reclaim has committed and its markers are written, so that a
	// watch.Watcher in the worker cancels the execution's context and its
	// external call stops costing money. watch.NewPublisher returns one, for
	// Redis pub/sub or Postgres LISTEN/NOTIFY. Defaults to nil: no notices
	// (leave the field unset; a nil *watch.Publisher stored in it is not a
	// nil Notifier).
	Notices Notifier
	// Shadow makes every sweep decide and write nothing: no row, parent,
	// marker or notice. The jobs a sweep would reclaim are counted in
	// Report.WouldReclaim, as the decision would_reclaim of
	// jobguard.reclaim.decisions, and logged one line each ("reclaim:
	// shadow: would reclaim", at info). Run beside a live reclaimer, or
	// after a limit was lowered, it shows what a limit would throw away
	// before it does. Shadow instances elect a leader among themselves, on
	// a lock key derived from the guard's Shared.LeaderKey, and never take
	// a live reclaimer's lock. Defaults to false.
	Shadow bool
	// Workers, when set, turns on the rescue: every sweep first reads the
	// PROCESSING jobs whose owner (the mapping's OwnerColumn, written by
	// StartGuard.Start under a lease) has no live lease in this workers
	// table, and sends them back to QUEUED under a new generation, in one
	// conditional write per page, whatever their type's limit: their
	// worker process died, was stopped or lost its path to the database.
	// A job with no owner, or whose owner's lease is live, is judged by
	// the limit and progress rule alone. A sweep that sees the database's
	// clock jump (Brake.ClockJump) rescues nothing, since every lease's
	// expiry is on that clock. The rescue needs the mapping's
	// OwnerColumn and GenerationColumn. Defaults to nil: no rescue.
	Workers *lease.Workers
	// Brake caps what one sweep reclaims, per type and in all, and holds
	// back a sweep whose evidence is suspect (the database's clock jumped):
	// see Brake. A Plan and a shadow sweep apply it too. Defaults to the
	// Brake defaults; a negative field turns its cap off.
	Brake Brake
	// OnReclaim holds the parent rule of each job type, run in the reclaim's
	// transaction for the rows that changed. Defaults to no rules.
	OnReclaim map[string]ParentRule
	// Interval is the pause between two sweeps of Run, and the longest a
	// standby waits before it tries to take over. Defaults to IntervalDefault.
	Interval time.Duration
	// SweepTimeout bounds each sweep: when it passes, the sweep stops where
	// it is (what it committed stands) and returns an error. The source
	// lists for at most three quarters of it, so that the decisions of the
	// pages it handed over are still written when the listing runs out of
	// time. Defaults to Interval.
	SweepTimeout time.Duration
	// LivenessTimeout bounds each round trip of Run's leader lock:
	// connecting, trying the lock, the leader's check before every sweep,
	// and the unlock on return. A leader whose check fails or times out
	// stops sweeping until it holds the lock again. It is part of the bound
	// on a takeover that Run documents. It also bounds how long the parent
	// rules of one sweep wait, all together, for parent rows other
	// transactions hold, and run their statements (and half of SweepTimeout
	// bounds it too): once that is spent, a rule that meets a held row fails
	// at once, and one whose statement runs past 100ms, and its job is
	// left for the next sweep, counted in Report.RuleErrors. Defaults to
	// LivenessTimeoutDefault (10 seconds).
	LivenessTimeout time.Duration
	// Logger receives one summary line per sweep (info, or warn when
	// something needs an operator: unreadable jobs, types without a limit,
	// failed parent rules, markers or notices), the leader's changes, and a
	// line per job at debug. Defaults to slog.Default().
	Logger *slog.Logger
	// Now is the clock a queue's start times are measured with. Progress,
	// and a start read from the jobs table, are measured on the database's
	// clock. Defaults to time.Now.
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
	markers *marker.RedisStore    // Shared.Markers = MarkersRedis
	table   *marker.PostgresStore // Shared.Markers = MarkersPostgres
	log     *slog.Logger
	met     *sweepMetrics
	orphans *jobset.Orphans // Config.Workers; nil without a rescue
	// released: the next sweep runs with its brake released.
	released atomic.Bool
	// countApart: the count of the jobs without a start ran out of its
	// budget in the opening batch (or failed there), and is read after the
	// reclaims until one of those readings takes under half the budget
	// (see openTable).
	countApart atomic.Bool
	// budget is defaultCountBudget; a test that counts round trips
	// lengthens it, so that a loaded machine cannot push the count out of
	// the batch.
	budget time.Duration
	// clock is the last sweep's reading of the two clocks.
	clock clocks
	// elapsed reads the reclaimer's side of those readings: time.Now,
	// whose monotonic reading no step of the wall clock moves, so that
	// only the database's clock can jump. A test replaces it.
	elapsed func() time.Time
}

// New validates cfg and fills in its defaults.
func New(cfg Config) (*Reclaimer, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("reclaim: new: %w", err)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("reclaim: new: %w", err)
	}
	r := &Reclaimer{cfg: cfg, log: cfg.Logger, met: newSweepMetrics(cfg.MeterProvider, cfg.Shadow), elapsed: time.Now,
		budget: defaultCountBudget}
	if cfg.Guard.Shared().Markers == jobguard.MarkersRedis {
		r.markers, err = marker.NewRedisStore(cfg.Guard, cfg.Redis, cfg.Markers)
	} else {
		r.table, err = marker.NewPostgresStore(cfg.Guard, cfg.Markers)
	}
	if err != nil {
		return nil, fmt.Errorf("reclaim: new: Markers: %w", err)
	}
	if cfg.Workers != nil {
		if r.orphans, err = jobset.New(cfg.Guard).Orphans(*cfg.Workers); err != nil {
			return nil, fmt.Errorf("reclaim: new: Workers: %w", err)
		}
	}
	return r, nil
}

// validate checks what New cannot default, naming the field.
func (cfg Config) validate() error {
	switch {
	case cfg.Guard == nil:
		return errors.New("Guard is nil")
	case cfg.DB == nil:
		return errors.New("DB is nil")
	case cfg.Redis == nil && cfg.Guard.Shared().Markers == jobguard.MarkersRedis:
		return errors.New("Redis is nil, and Guard's Shared.Markers is MarkersRedis")
	}
	for _, d := range []struct {
		field string
		value time.Duration
	}{
		{"NoProgress", cfg.NoProgress}, {"Interval", cfg.Interval},
		{"SweepTimeout", cfg.SweepTimeout}, {"LivenessTimeout", cfg.LivenessTimeout},
	} {
		if err := interval.Check(d.field, d.value); err != nil {
			return err
		}
	}
	if err := cfg.Brake.validate(); err != nil {
		return err
	}
	if cfg.PageSize < 0 {
		return fmt.Errorf("PageSize %d is negative", cfg.PageSize)
	}
	for typ, pr := range cfg.OnReclaim {
		if pr == nil {
			return fmt.Errorf("OnReclaim[%q] is nil", typ)
		}
	}
	return nil
}

// withDefaults fills in every field left at its zero value.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Source == nil {
		src, err := NewTableSource(cfg.Guard, cfg.DB)
		if err != nil {
			return cfg, fmt.Errorf("Source: %w", err)
		}
		cfg.Source = src
	}
	if cfg.Limits == nil {
		limits, err := NewTableLimits(TableLimitsConfig{DB: cfg.DB})
		if err != nil {
			return cfg, fmt.Errorf("Limits: %w", err)
		}
		cfg.Limits = limits
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.NoProgress, NoProgressDefault)
	def(&cfg.Interval, IntervalDefault)
	def(&cfg.SweepTimeout, cfg.Interval)
	def(&cfg.LivenessTimeout, LivenessTimeoutDefault)
	if cfg.PageSize == 0 {
		cfg.PageSize = PageSizeDefault
	}
	cfg.Brake = cfg.Brake.withDefaults()
	// The logger is the caller's code, called right after the state
	// changes it reports: its panic must not undo them.
	cfg.Logger = safe.Logger(cfg.Logger)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg, nil
}

// Notifier announces reclaimed executions, once their reclaim has
// committed: a notice cancels work at once, so it must never announce a
// reclaim that rolled back. watch's *Publisher satisfies it. A Publish that
// fails or panics is counted in Report.NoticeErrors; its context ends 10
// seconds after the commit, and Publish must return then: one that has not
// a second later is abandoned, its notices counted as errors.
type Notifier interface {
	Publish(ctx context.Context, reclaimed ...jobguard.Execution) error
}
