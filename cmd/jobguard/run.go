package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/internal/service"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/retain"
)

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

A sweep that would reclaim far more than usual brakes (reclaim.Brake, the
--brake-* flags): it reclaims the jobs stalled longest up to the cap, logs
its line at error with braked and brake, and counts the others as braked
(the alert JobguardSweepBraked). A new sweep decides afresh each interval,
a cap at a time; --release-brake releases the brake for the service's first
sweep, to reclaim a known stall at once. 'jobguard limits pause <type>'
switches a type off without a restart.

--retain also runs the retention sweep of 'jobguard retain' every
--retain-interval, with its ages: off by default, as removing rows is a
decision to take once the ages are chosen. Run it with --shadow too: it
removes only what is finished, whatever the reclaimer decides.

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
		f.boolean(&s.ReleaseBrake, "release-brake", "release the brake for the first sweep only")
		f.str(&o.MetricsAddr, "metrics-addr", "serve the metrics for Prometheus at http://<addr>/metrics (empty: off)")
		f.boolean(&o.Compensate, "compensate", "also run the compensation sweep over the artifacts table")
		f.str(&o.ArtifactsSchema, "artifacts-schema", "schema of the artifacts table (empty: the jobs table's)")
		f.str(&o.ArtifactsTable, "artifacts-table", "name of the artifacts table")
		f.str(&o.FileKind, "file-kind", "kind of the artifacts that are files, compensated by removing the file at their ref")
		f.section("Retention")
		f.boolean(&s.Retain.Enabled, "retain", "also run the retention sweep of 'jobguard retain' (off by default)")
		f.duration(&s.Retain.Interval, "retain-interval", "pause between two retention sweeps")
		f.retainGroup(s)
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
	return serviceOpts{MetricsAddr: service.MetricsAddrDefault, ArtifactsTable: compensate.TableDefault, FileKind: "file"}
}

func runService(ctx context.Context, c *cli, s *settings, _ []string) error {
	if err := errors.Join(s.Service.check(), s.Retain.check()); err != nil {
		return err
	}
	log, err := c.logger(s)
	if err != nil {
		return err
	}
	svc, err := service.Start("jobguard: run", log, s.Service.MetricsAddr)
	if err != nil {
		return fail(exitError, fmt.Errorf("--metrics-addr: %w", err),
			"choose a free address with --metrics-addr, or turn the endpoint off with --metrics-addr ''")
	}
	defer svc.Stop(ctx)
	cn, err := c.openDB(ctx, s)
	if err != nil {
		return err
	}
	defer cn.close()
	w, err := cn.wireService(ctx, s, svc.MeterProvider())
	if err != nil {
		return err
	}
	if len(w.limits) == 0 {
		log.Warn("jobguard: run: the limits table is empty: no job can be reclaimed until a limit is set",
			slog.String("limits_table", limitsName(s)))
	}
	if s.ReleaseBrake {
		w.reclaimer.ReleaseBrake()
	}
	svc.Run(ctx, w.attrs(s), w.sweeps()...)
	return nil
}

// check refuses the combinations of options run cannot serve.
func (o serviceOpts) check() error {
	switch {
	case o.Shadow && o.Compensate:
		return usageErr("--shadow writes nothing, and --compensate would: choose one")
	case o.Compensate && o.FileKind == "":
		return usageErr("--compensate needs --file-kind, the kind of the artifacts it can undo")
	}
	return nil
}

// serviceParts are what run runs: the reclaimer and, with --compensate,
// the compensation sweep.
type serviceParts struct {
	guard     *jobguard.Guard
	reclaimer *reclaim.Reclaimer
	// rules counts the parent rules the reclaimer runs.
	rules int
	// limits are the limits read at the start.
	limits map[string]time.Duration
	// artifacts is nil without --compensate.
	artifacts *compensate.Artifacts
	// retention is nil without --retain, or when no table is there.
	retention *retain.Sweeper
}

// wireService builds what run runs, every part recording its metrics on
// mp: the reclaimer, which writes nothing with --shadow, and, with
// --compensate, the compensation sweep over the artifacts table.
func (cn *conns) wireService(ctx context.Context, s *settings, mp metric.MeterProvider) (*serviceParts, error) {
	o := s.Service
	u := sweeps
	if o.Shadow {
		u = plans
	}
	guard, cfg, err := cn.reclaimConfig(ctx, s, mp, u)
	if err != nil {
		return nil, err
	}
	// The limits are read at every sweep; read them once now, so that a
	// missing table stops the service at its start, not at every sweep.
	w := &serviceParts{guard: guard, rules: len(cfg.OnReclaim)}
	if w.limits, err = readLimits(ctx, cfg.Limits, s); err != nil {
		return nil, err
	}
	cfg.Shadow = o.Shadow
	if w.reclaimer, err = reclaim.New(cfg); err != nil {
		return nil, err
	}
	if s.Retain.Enabled {
		if w.retention, _, err = cn.retainSweeper(ctx, s, guard, mp); err != nil {
			return nil, err
		}
	}
	if !o.Compensate {
		return w, nil
	}
	schema := o.ArtifactsSchema
	if schema == "" {
		schema = s.Table.Schema
	}
	w.artifacts, err = compensate.New(ctx, compensate.Config{Guard: guard, DB: cn.pool, Schema: schema, Table: o.ArtifactsTable,
		Compensators: map[string]compensate.Func{o.FileKind: removeFile}, Interval: s.Interval, Logger: cn.log, MeterProvider: mp})
	if err != nil {
		return nil, fail(exitError, err, "create the artifacts table with compensate's migration, point --artifacts-schema "+
			"and --artifacts-table at yours, or leave --compensate out")
	}
	return w, nil
}

// attrs are the attributes of the service's start line.
func (w *serviceParts) attrs(s *settings) []slog.Attr {
	return append([]slog.Attr{
		slog.String("table", w.guard.Table().QualifiedName()),
		slog.String("source", s.Source), slog.String("limits_table", limitsName(s)), slog.Int("limits", len(w.limits)),
		slog.Duration("interval", s.Interval), slog.Duration("no_progress", s.NoProgress), slog.Bool("shadow", s.Service.Shadow),
		slog.Bool("compensate", s.Service.Compensate), slog.Bool("retain", w.retention != nil), slog.String("notices", s.Notices), slog.Int("parent_rules", w.rules),
		slog.String("marker_prefix", w.guard.Shared().Prefix)}, w.reclaimer.LeaderAttrs()...)
}

// sweeps are the loops the service runs until it stops.
func (w *serviceParts) sweeps() []func(context.Context) error {
	sweeps := []func(context.Context) error{w.reclaimer.Run}
	if w.artifacts != nil {
		sweeps = append(sweeps, w.artifacts.Run)
	}
	if w.retention != nil {
		sweeps = append(sweeps, w.retention.Run)
	}
	return sweeps
}

// removeFile compensates an artifact that is a file: it removes the file
// at its ref. A file already gone is done, so it may run again.
func removeFile(_ context.Context, _ pgx.Tx, a compensate.Artifact) error {
	if err := os.Remove(a.Ref); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
