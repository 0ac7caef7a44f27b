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
// The service wires the library where it can be read: run connects
// (flow.Connect: the pool, Redis, the migrations), and wire builds the
// guard over the jobs table, with the settings the workers share, the
// reclaimer with its source, limits, parent rules and notice publisher,
// and the artifacts and the settler whose sweeps it runs. It builds no
// start guard, heartbeat or watcher: it runs no executions.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/examples/internal/flow"
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
	var cfg flow.Config
	fs := flag.NewFlagSet("reclaimer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.Flags(fs)
	o := options{limits: limitFlag{}}
	var err error
	o.interval, err = durationEnv("JOBGUARD_RECLAIM_INTERVAL", reclaim.IntervalDefault)
	if err != nil {
		fmt.Fprintf(stderr, "reclaimer: %v\n", err)
		return 2
	}
	o.noProgress, err = durationEnv("JOBGUARD_NO_PROGRESS", reclaim.NoProgressDefault)
	if err != nil {
		fmt.Fprintf(stderr, "reclaimer: %v\n", err)
		return 2
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
	metricsAddr := fs.String("metrics-addr", MetricsAddrDefault,
		"serve the metrics for Prometheus at http://<addr>/metrics (empty: no metrics)")
	format := fs.String("log-format", "text", "log format: text or json")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	switch cfg.Notices {
	case flow.NoticesRedis, flow.NoticesPostgres, flow.NoticesOff:
	default:
		fmt.Fprintf(stderr, "reclaimer: -notices %q: want redis, postgres or off\n", cfg.Notices)
		return 2
	}
	log, err := newLogger(stderr, *format, *level)
	if err != nil {
		fmt.Fprintf(stderr, "reclaimer: %v\n", err)
		return 2
	}

	var mp metric.MeterProvider // nil: no metrics
	if *metricsAddr != "" {
		m, err := serveMetrics(*metricsAddr)
		if err != nil {
			log.Error("reclaimer: cannot start", slog.Any("error", err))
			return 1
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := m.shutdown(ctx); err != nil {
				log.Warn("reclaimer: metrics server did not stop cleanly", slog.Any("error", err))
			}
		}()
		mp = m.Provider
		log.Info("reclaimer: serving metrics", slog.String("url", "http://"+m.Addr+"/metrics"))
	}

	conns, err := flow.Connect(ctx, cfg)
	if err != nil {
		log.Error("reclaimer: cannot start", slog.Any("error", err))
		return 1
	}
	defer conns.Close()
	svc, err := wire(ctx, conns, cfg, o, log, mp)
	if err != nil {
		log.Error("reclaimer: cannot start", slog.Any("error", err))
		return 1
	}
	log.Info("reclaimer: started", slog.String("schema", conns.Schema), slog.String("marker_prefix", cfg.Shared().Prefix),
		slog.Duration("interval", o.interval), slog.Duration("no_progress", o.noProgress),
		slog.String("limits", o.limits.String()), slog.String("bullmq_queue", o.queue), slog.Bool("compensate", o.compensate), slog.Bool("settle", o.settle),
		slog.String("notices", cfg.Notices))

	var wg sync.WaitGroup
	if svc.artifacts != nil {
		wg.Go(func() { _ = svc.artifacts.Run(ctx) }) // returns nil when ctx ends
	}
	if svc.settler != nil {
		wg.Go(func() { _ = svc.settler.Run(ctx) }) // returns nil when ctx ends
	}
	_ = svc.reclaimer.Run(ctx) // returns nil when ctx ends
	wg.Wait()
	log.Info("reclaimer: stopped")
	return 0
}

// options are the service's own flags.
type options struct {
	interval, noProgress           time.Duration
	limits                         limitFlag
	queue, queuePrefix, rowIDField string
	compensate, settle             bool
}

// service is what the service runs: the reclaimer, and the sweeps of the
// artifacts and the finalize records.
type service struct {
	reclaimer *reclaim.Reclaimer
	// artifacts is nil without -compensate.
	artifacts *compensate.Artifacts
	// settler is nil without -settle.
	settler *settle.Settler
}

// wire builds the parts of the library the service uses, each from the
// ones before it, every one of them recording its metrics on mp: the guard
// over the jobs table, with the settings the workers share; the reclaimer,
// over the jobs table or a BullMQ queue, with the limits of -limit or of
// the job_type_limits table, the examples' parent rules and, unless
// -notices off, a publisher of its reclaims; and, unless turned off, the
// artifacts with the examples' compensators, and the settler with the
// video's metadata updates and billing.
func wire(ctx context.Context, conns *flow.Conns, cfg flow.Config, o options, log *slog.Logger, mp metric.MeterProvider) (*service, error) {
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
		NoProgress: o.noProgress, Interval: o.interval, Logger: log, MeterProvider: mp}
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
	svc := &service{}
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

// newLogger builds the service's logger.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var min slog.Level
	if err := min.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: min}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("-log-format %q: want text or json", format)
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
