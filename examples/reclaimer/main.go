// Command reclaimer is the recovery service as a long-running process: it
// sweeps the jobs table on an interval, reclaims the jobs that are really
// stuck (over their type's runtime limit and without progress), runs the
// examples' parent rules, writes the Redis markers the start guard reads,
// compensates what rejected executions left behind, and settles the
// finalize records that crashed or failed video workers left (settle). Any number of
// instances may run: one leads (a Postgres advisory lock), the others wait.
//
//	go run ./examples/reclaimer -interval 10s -no-progress 1m -limit chapter=5m -limit video=20m
//
// Every flag can also come from the environment: JOBGUARD_DATABASE_URL,
// JOBGUARD_REDIS_URL, JOBGUARD_RECLAIM_INTERVAL, JOBGUARD_NO_PROGRESS.
// Without -limit the limits are read from the job_type_limits table at
// every sweep. With -bullmq-queue the active jobs and the start of their
// current attempt (processedOn) are read from a BullMQ queue in Redis. Logs
// are structured (slog), one line per sweep; SIGINT or SIGTERM stops it
// cleanly, releasing the leader lock.
//
// Every reclaim is announced to the workers (-notices redis|postgres|off),
// whose watcher cancels the reclaimed execution's work. The guards' metrics
// are served for Prometheus at http://127.0.0.1:9464/metrics
// (-metrics-addr; empty disables).
//
// It is served as 'jobguard run' is, by the same code (internal/service:
// the logger, the /metrics endpoint, the loop of the sweeps); what differs
// is what it runs. The service wires the library where it can be read:
// serve connects (flow.Connect: the pool, Redis, the migrations), and wire
// builds the guard over the jobs table, with the settings the workers
// share, the reclaimer with its source, limits, parent rules and notice
// publisher, and the artifacts and the settler whose sweeps it runs. It
// builds no start guard, heartbeat or watcher: it runs no executions.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/examples/internal/flow"
	"github.com/jobguard/jobguard/internal/service"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/reclaim/bullmq"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/watch"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// run serves until ctx ends and returns the exit code.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	cfg, o, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, errFlags) {
			fmt.Fprintf(stderr, "reclaimer: %v\n", err)
		}
		return 2
	}
	h, err := service.Handler(stderr, o.logFormat, o.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "reclaimer: -%v\n", err)
		return 2
	}
	log := slog.New(h)
	if err := serve(ctx, cfg, o, log); err != nil {
		log.Error("reclaimer: cannot start", slog.Any("error", err))
		return 1
	}
	return 0
}

// errFlags is parseFlags' error for the flags the flag package has
// already reported.
var errFlags = errors.New("bad flags")

// parseFlags reads the flags, with the environment's values as their
// defaults.
func parseFlags(args []string, stderr io.Writer) (flow.Config, options, error) {
	var cfg flow.Config
	fs := flag.NewFlagSet("reclaimer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.Flags(fs)
	o := options{limits: limitFlag{}}
	var err error
	if o.interval, err = durationEnv("JOBGUARD_RECLAIM_INTERVAL", reclaim.IntervalDefault); err != nil {
		return cfg, o, err
	}
	if o.noProgress, err = durationEnv("JOBGUARD_NO_PROGRESS", reclaim.NoProgressDefault); err != nil {
		return cfg, o, err
	}
	fs.DurationVar(&o.interval, "interval", o.interval, "pause between sweeps (env JOBGUARD_RECLAIM_INTERVAL)")
	fs.DurationVar(&o.noProgress, "no-progress", o.noProgress,
		"how long updated_at must stand still before a job over its limit is reclaimed (env JOBGUARD_NO_PROGRESS)")
	fs.Var(o.limits, "limit", "maximum runtime of a job type, as type=duration; repeat per type (default: the job_type_limits table)")
	fs.StringVar(&o.queue, "bullmq-queue", "", "watch this BullMQ queue's active jobs instead of the jobs table's PROCESSING rows")
	fs.StringVar(&o.queuePrefix, "bullmq-prefix", bullmq.PrefixDefault, "the BullMQ queue's key prefix")
	fs.StringVar(&o.rowIDField, "bullmq-row-id-field", "", "field of a BullMQ job's data that holds its row id (default: the BullMQ job id)")
	fs.BoolVar(&o.compensate, "compensate", true, "also compensate the artifacts of rejected executions")
	fs.BoolVar(&o.settle, "settle", true, "also settle the finalize records that crashed or failed video workers left: re-run their metadata updates, bill them once")
	fs.StringVar(&o.metricsAddr, "metrics-addr", service.MetricsAddrDefault,
		"serve the metrics for Prometheus at http://<addr>/metrics (empty: no metrics)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return cfg, o, errFlags
	}
	switch cfg.Notices {
	case flow.NoticesRedis, flow.NoticesPostgres, flow.NoticesOff:
	default:
		return cfg, o, fmt.Errorf("-notices %q: want redis, postgres or off", cfg.Notices)
	}
	return cfg, o, nil
}

// serve connects, wires the service and runs its sweeps until ctx ends.
func serve(ctx context.Context, cfg flow.Config, o options, log *slog.Logger) error {
	svc, err := service.Start("reclaimer", log, o.metricsAddr)
	if err != nil {
		return fmt.Errorf("-metrics-addr: %w", err)
	}
	defer svc.Stop(ctx)
	conns, err := flow.Connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conns.Close()
	parts, err := wire(ctx, conns, cfg, o, log, svc.MeterProvider())
	if err != nil {
		return err
	}
	svc.Run(ctx, []slog.Attr{slog.String("schema", conns.Schema), slog.String("marker_prefix", cfg.Shared().Prefix),
		slog.Duration("interval", o.interval), slog.Duration("no_progress", o.noProgress),
		slog.String("limits", o.limits.String()), slog.String("bullmq_queue", o.queue), slog.Bool("compensate", o.compensate),
		slog.Bool("settle", o.settle), slog.String("notices", cfg.Notices)}, parts.sweeps()...)
	return nil
}

// options are the service's own flags.
type options struct {
	interval, noProgress           time.Duration
	limits                         limitFlag
	queue, queuePrefix, rowIDField string
	compensate, settle             bool
	metricsAddr                    string
	logFormat, logLevel            string
}

// parts are what the service runs: the reclaimer, and the sweeps of the
// artifacts and the finalize records.
type parts struct {
	reclaimer *reclaim.Reclaimer
	// artifacts is nil without -compensate.
	artifacts *compensate.Artifacts
	// settler is nil without -settle.
	settler *settle.Settler
}

// sweeps are the loops the service runs until it stops.
func (p *parts) sweeps() []func(context.Context) error {
	sweeps := []func(context.Context) error{p.reclaimer.Run}
	if p.artifacts != nil {
		sweeps = append(sweeps, p.artifacts.Run)
	}
	if p.settler != nil {
		sweeps = append(sweeps, p.settler.Run)
	}
	return sweeps
}

// wire builds the parts of the library the service uses, each from the
// ones before it, every one of them recording its metrics on mp: the guard
// over the jobs table, with the settings the workers share; the reclaimer,
// over the jobs table or a BullMQ queue, with the limits of -limit or of
// the job_type_limits table, the examples' parent rules and, unless
// -notices off, a publisher of its reclaims; and, unless turned off, the
// artifacts with the examples' compensators, and the settler with the
// video's metadata updates and billing.
func wire(ctx context.Context, conns *flow.Conns, cfg flow.Config, o options, log *slog.Logger, mp metric.MeterProvider) (*parts, error) {
	guard, err := jobguard.NewWithConfig(ctx, conns.Pool, jobguard.DefaultTable(),
		jobguard.GuardConfig{Shared: cfg.Shared(), MeterProvider: mp})
	if err != nil {
		return nil, err
	}
	rules, err := flow.ParentRules()
	if err != nil {
		return nil, err
	}
	rc := reclaim.Config{Guard: guard, DB: conns.Pool, Redis: conns.Redis, OnReclaim: rules,
		NoProgress: o.noProgress, Interval: o.interval, Logger: log, MeterProvider: mp,
		// A short interval must not be each sweep's deadline too: a reclaim
		// the server commits after the client gave up is never announced,
		// and its execution runs on until the watcher's periodic check.
		SweepTimeout: max(o.interval, time.Minute)}
	if len(o.limits) > 0 {
		rc.Limits = reclaim.StaticLimits(o.limits)
	}
	if o.queue != "" {
		rc.Source, err = bullmq.New(bullmq.Config{Redis: conns.Redis, Prefix: o.queuePrefix, Queue: o.queue, RowIDField: o.rowIDField})
		if err != nil {
			return nil, err
		}
	}
	if transport, notices := conns.Transport(); notices {
		// Every reclaim is announced: the workers' watcher cancels the
		// execution that lost its job.
		if rc.Notices, err = watch.NewPublisher(guard, transport); err != nil {
			return nil, err
		}
	}
	svc := &parts{}
	if svc.reclaimer, err = reclaim.New(rc); err != nil {
		return nil, err
	}
	if o.compensate {
		svc.artifacts, err = compensate.New(ctx, compensate.Config{Guard: guard, DB: conns.Pool,
			Compensators: flow.Compensators(), Logger: log, MeterProvider: mp})
		if err != nil {
			return nil, err
		}
	}
	if o.settle {
		svc.settler, err = settle.New(ctx, settle.Config{Guard: guard, DB: conns.Pool,
			Handlers: flow.VideoHandlers(conns.Pool, nil), Increments: flow.VideoIncrements(), Logger: log, MeterProvider: mp})
		if err != nil {
			return nil, err
		}
	}
	return svc, nil
}

// limitFlag collects -limit type=duration flags.
type limitFlag map[string]time.Duration

func (l limitFlag) String() string {
	if len(l) == 0 {
		return "job_type_limits table"
	}
	parts := make([]string, 0, len(l))
	for typ, d := range l {
		parts = append(parts, typ+"="+d.String())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (l limitFlag) Set(v string) error {
	typ, d, ok := strings.Cut(v, "=")
	if !ok || typ == "" {
		return fmt.Errorf("%q: want type=duration", v)
	}
	dur, err := time.ParseDuration(d)
	if err != nil || dur <= 0 {
		return fmt.Errorf("%q: want a positive duration", v)
	}
	l[typ] = dur
	return nil
}

// durationEnv reads a duration from the environment, or returns def when
// the variable is unset.
func durationEnv(name string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return d, nil
}
