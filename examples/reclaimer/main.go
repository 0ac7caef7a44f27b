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

	"github.com/jobguard/jobguard/examples/internal/flow"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/reclaim/bullmq"
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
	interval, err := durationEnv("JOBGUARD_RECLAIM_INTERVAL", reclaim.IntervalDefault)
	if err != nil {
		fmt.Fprintf(stderr, "reclaimer: %v\n", err)
		return 2
	}
	noProgress, err := durationEnv("JOBGUARD_NO_PROGRESS", reclaim.NoProgressDefault)
	if err != nil {
		fmt.Fprintf(stderr, "reclaimer: %v\n", err)
		return 2
	}
	fs.DurationVar(&interval, "interval", interval, "pause between sweeps (env JOBGUARD_RECLAIM_INTERVAL)")
	fs.DurationVar(&noProgress, "no-progress", noProgress,
		"how long updated_at must stand still before a job over its limit is reclaimed (env JOBGUARD_NO_PROGRESS)")
	limits := limitFlag{}
	fs.Var(limits, "limit", "maximum runtime of a job type, as type=duration; repeat per type (default: the job_type_limits table)")
	queue := fs.String("bullmq-queue", "", "watch this BullMQ queue's active jobs instead of the jobs table's PROCESSING rows")
	queuePrefix := fs.String("bullmq-prefix", bullmq.PrefixDefault, "the BullMQ queue's key prefix")
	rowIDField := fs.String("bullmq-row-id-field", "", "field of a BullMQ job's data that holds its row id (default: the BullMQ job id)")
	compensate := fs.Bool("compensate", true, "also compensate the artifacts of rejected executions")
	settleRecords := fs.Bool("settle", true, "also settle the finalize records that crashed or failed video workers left: re-run their metadata updates, bill them once")
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
	var log *slog.Logger
	log, err = newLogger(stderr, *format, *level)
	if err != nil {
		fmt.Fprintf(stderr, "reclaimer: %v\n", err)
		return 2
	}
	cfg.Logger = log
	// The service runs no executions: it publishes notices, it watches none.
	cfg.NoWatcher = true

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
		cfg.MeterProvider = m.Provider
		log.Info("reclaimer: serving metrics", slog.String("url", "http://"+m.Addr+"/metrics"))
	}

	env, err := flow.Open(ctx, cfg)
	if err != nil {
		log.Error("reclaimer: cannot start", slog.Any("error", err))
		return 1
	}
	defer env.Close()
	rc := flow.ReclaimConfig{NoProgress: noProgress, Interval: interval}
	if len(limits) > 0 {
		rc.Limits = reclaim.StaticLimits(limits)
	}
	if *queue != "" {
		rc.Source, err = bullmq.New(bullmq.Config{Redis: env.Redis, Prefix: *queuePrefix, Queue: *queue, RowIDField: *rowIDField})
		if err != nil {
			log.Error("reclaimer: cannot start", slog.Any("error", err))
			return 1
		}
	}
	r, err := flow.NewReclaimer(env, rc)
	if err != nil {
		log.Error("reclaimer: cannot start", slog.Any("error", err))
		return 1
	}
	log.Info("reclaimer: started", slog.String("schema", env.Schema), slog.String("marker_prefix", env.Guard.Shared().Prefix),
		slog.Duration("interval", interval), slog.Duration("no_progress", noProgress),
		slog.String("limits", limits.String()), slog.String("bullmq_queue", *queue), slog.Bool("compensate", *compensate), slog.Bool("settle", *settleRecords),
		slog.String("notices", cfg.Notices))

	var wg sync.WaitGroup
	if *compensate {
		wg.Go(func() { _ = env.Artifacts.Run(ctx) }) // returns nil when ctx ends
	}
	if *settleRecords {
		wg.Go(func() { _ = env.Settler.Run(ctx) }) // returns nil when ctx ends
	}
	_ = r.Run(ctx) // returns nil when ctx ends
	wg.Wait()
	log.Info("reclaimer: stopped")
	return 0
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
