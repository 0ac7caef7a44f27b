package main

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/reclaim"
)

// shutdownTimeout bounds the metrics server's shutdown after the sweeps
// stopped.
const shutdownTimeout = 5 * time.Second

var runCommand = &command{
	name:  "run",
	short: "the reclaimer service: sweeps on an interval, /metrics, until SIGTERM",
	long: `
Run is the reclaimer as a long-running service. Every --interval it sweeps
(reclaim.Reclaimer.Run): it lists the active jobs (--source), fails those
over their type's limit AND without progress for --no-progress, in one
conditional write, runs the config file's parent rules in the same
transaction, writes the Redis markers the workers' start guards read, and
announces each reclaim (--notices). Any number of instances may run: one
leads (a Postgres advisory lock on --leader-key), the others wait and take
over within a bounded time.

It works on any mapped table (flags or --config). The limits are read from
the limits table at every sweep: change one with 'jobguard limits set',
no restart needed.

--shadow decides and writes nothing: the jobs a sweep would reclaim are
logged ("reclaim: shadow: would reclaim") and counted (the decision
would_reclaim of jobguard_reclaim_decisions_total). Shadow instances elect
their own leader, on --leader-key with its top bit flipped (both keys are
in the start line), so a shadow service can run beside a live one, after
a limit was lowered, say.

--compensate also runs the compensation sweep (package compensate) over
the artifacts table: artifacts of rejected executions are undone, those of
kind --file-kind by removing the file at their ref, which this process must
see (a shared volume). Artifacts of other kinds need the compensators of
your own code, in a process of yours; here they count as failed attempts
and stay owed. The settle sweep is not run here: it needs your update
handlers and usage increments (settle.Config), so run settle.Settler.Run in
a process of yours.

Metrics are served for Prometheus at http://<--metrics-addr>/metrics.
Logs are structured (--log-format text or json), one line per sweep.
SIGTERM or SIGINT stops it: the sweep under way stops (what it committed
stands), the leader lock is released, and it exits 0; a second signal ends
it at once.

Exit codes: 0 stopped by a signal, 1 it could not start (the message says
why), 2 usage.`,
	flags: func(f *flags, s *settings) {
		s.LogLevel = "info"
		o := &s.Service
		f.section("Service")
		f.duration(&s.Interval, "interval", "pause between two sweeps, and the longest a standby waits to take over")
		f.boolean(&o.Shadow, "shadow", "decide and write nothing; log and count what would be reclaimed")
		f.str(&o.MetricsAddr, "metrics-addr", "serve the metrics for Prometheus at http://<addr>/metrics (empty: off)")
		f.boolean(&o.Compensate, "compensate", "also run the compensation sweep over the artifacts table")
		f.str(&o.ArtifactsSchema, "artifacts-schema", "schema of the artifacts table (empty: the jobs table's)")
		f.str(&o.ArtifactsTable, "artifacts-table", "name of the artifacts table")
		f.str(&o.FileKind, "file-kind", "kind of the artifacts that are files, compensated by removing the file at their ref")
		f.commonGroups(s)
		f.decisionGroup(s, true)
		f.sourceGroup(s)
		f.section("Logs")
		f.logGroup(s)
	},
	run: runService,
}

// serviceOpts are the options of run.
type serviceOpts struct {
	MetricsAddr                     string
	Shadow                          bool
	Compensate                      bool
	ArtifactsSchema, ArtifactsTable string
	FileKind                        string
}

func defaultService() serviceOpts {
	return serviceOpts{MetricsAddr: metricsAddrDefault, ArtifactsTable: compensate.TableDefault, FileKind: "file"}
}

func runService(ctx context.Context, c *cli, s *settings, args []string) error {
	o := s.Service
	switch {
	case len(args) > 0:
		return usageErr("run takes no arguments; got %q", args)
	case o.Shadow && o.Compensate:
		return usageErr("--shadow writes nothing, and --compensate would: choose one")
	case o.Compensate && o.FileKind == "":
		return usageErr("--compensate needs --file-kind, the kind of the artifacts it can undo")
	}
	log, err := c.logger(s)
	if err != nil {
		return err
	}
	var mp metric.MeterProvider // nil: no metrics
	if o.MetricsAddr != "" {
		m, err := serveMetrics(o.MetricsAddr, log)
		if err != nil {
			return err
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
			defer cancel()
			if err := m.shutdown(ctx); err != nil {
				log.Warn("jobguard: run: metrics server did not stop cleanly", slog.Any("error", err))
			}
		}()
		mp = m.provider
		log.Info("jobguard: run: serving metrics", slog.String("url", "http://"+m.addr+"/metrics"))
	}

	cn, err := c.openDB(ctx, s)
	if err != nil {
		return err
	}
	defer cn.close()
	if err := cn.openRedis(ctx, s, !o.Shadow); err != nil {
		return err
	}
	guard, err := cn.guard(ctx, s, mp)
	if err != nil {
		return err
	}
	src, err := cn.source(guard, s)
	if err != nil {
		return err
	}
	tl, err := cn.limits(s)
	if err != nil {
		return err
	}
	// The limits are read at every sweep; read them once now, so that a
	// missing table stops the service at its start, not at every sweep.
	limits, err := readLimits(ctx, tl, s)
	if err != nil {
		return err
	}
	cfg := reclaim.Config{Guard: guard, DB: cn.pool, Redis: cn.redis, Source: src, Limits: tl, NoProgress: s.NoProgress,
		Interval: s.Interval, SweepTimeout: s.SweepTimeout, PageSize: s.PageSize, Shadow: o.Shadow,
		Logger: log, MeterProvider: mp}
	if cfg.OnReclaim, err = parentRules(s); err != nil {
		return err
	}
	if !o.Shadow {
		if cfg.Notices, err = cn.notices(guard, s); err != nil {
			return err
		}
	}
	r, err := reclaim.New(cfg)
	if err != nil {
		return err
	}
	var arts *compensate.Artifacts
	if o.Compensate {
		schema := o.ArtifactsSchema
		if schema == "" {
			schema = s.Table.Schema
		}
		arts, err = compensate.New(ctx, compensate.Config{Guard: guard, DB: cn.pool, Schema: schema, Table: o.ArtifactsTable,
			Compensators: map[string]compensate.Func{o.FileKind: removeFile}, Interval: s.Interval, Logger: log, MeterProvider: mp})
		if err != nil {
			return fail(exitError, err, "create the artifacts table with compensate's migration, point --artifacts-schema "+
				"and --artifacts-table at yours, or leave --compensate out")
		}
	}
	if len(limits) == 0 {
		log.Warn("jobguard: run: the limits table is empty: no job can be reclaimed until a limit is set",
			slog.String("limits_table", limitsName(s)))
	}
	log.LogAttrs(ctx, slog.LevelInfo, "jobguard: run: started", append([]slog.Attr{
		slog.String("table", guard.Table().QualifiedName()),
		slog.String("source", s.Source), slog.String("limits_table", limitsName(s)), slog.Int("limits", len(limits)),
		slog.Duration("interval", s.Interval), slog.Duration("no_progress", s.NoProgress), slog.Bool("shadow", o.Shadow),
		slog.Bool("compensate", o.Compensate), slog.String("notices", s.Notices), slog.Int("parent_rules", len(cfg.OnReclaim)),
		slog.String("marker_prefix", guard.Shared().Prefix)}, r.LeaderAttrs()...)...)

	var wg sync.WaitGroup
	if arts != nil {
		wg.Go(func() { _ = arts.Run(ctx) }) // returns nil when ctx ends
	}
	_ = r.Run(ctx) // returns nil when ctx ends
	wg.Wait()
	log.Info("jobguard: run: stopped")
	return nil
}

// removeFile compensates an artifact that is a file: it removes the file
// at its ref. A file already gone is done, so it may run again.
func removeFile(_ context.Context, _ pgx.Tx, a compensate.Artifact) error {
	if err := os.Remove(a.Ref); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
