package main

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/lease"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/watch"
)

var sweepCommand = &command{
	name:  "sweep",
	short: "one reclaim sweep; --dry-run prints its plan and writes nothing",
	long: `
Sweep runs one reclaim sweep now, as the reclaimer service runs them, and
prints its report: how many jobs were listed, reclaimed, kept as
progressing, and so on (reclaim.Report). It needs no leader: a sweep beside
a running reclaimer is safe, as every reclaim is a conditional write.

With --dry-run it decides the same and writes nothing (reclaim's Plan): no
row, parent, marker or notice. It prints every job the source lists, with
its runtime, limit, time without progress, decision and why. The table
source lists only the running jobs over their type's limit; a queue source
lists every active job.

A sweep that would reclaim far more than usual brakes (reclaim.Brake): past
a cap (--brake-max-jobs, --brake-max-share and their per-type forms; the
share caps never below --brake-share-floor), or when the database's clock
jumped, it reclaims the jobs stalled longest up to the cap and holds back
the others, counted as braked, and says why. Once you know what stalled
them, --release-brake reclaims them all in one sweep. A type paused with
'jobguard limits pause' is counted as paused; one in shadow as would
reclaim.

On a terminal a progress line counts the jobs read; piped, it stays quiet.`,
	flags: func(f *flags, s *settings) {
		f.section("Sweep")
		f.boolean(&s.DryRun, "dry-run", "decide and write nothing; print the plan")
		f.boolean(&s.ReleaseBrake, "release-brake", "reclaim every job the sweep decides to, whatever the brake's caps and the clocks")
		f.commonGroups(s)
		f.decisionGroup(s, true)
		f.sourceGroup(s)
		f.outputGroup(s, true)
	},
	run: sweep,
}

func sweep(ctx context.Context, c *cli, s *settings, _ []string) error {
	cn, err := c.openDB(ctx, s)
	if err != nil {
		return err
	}
	defer cn.close()
	use, what := sweeps, "sweeping"
	if s.DryRun {
		use, what = plans, "planning"
	}
	_, cfg, err := cn.reclaimConfig(ctx, s, nil, use)
	if err != nil {
		return err
	}
	p := c.newProgress(s, what)
	defer p.done()
	cfg.Source = countPages(cfg.Source, p, cn.queueTodo(s))
	r, err := reclaim.New(cfg)
	if err != nil {
		return err
	}
	if s.ReleaseBrake {
		r.ReleaseBrake()
	}
	if s.DryRun {
		plan, err := r.Plan(ctx)
		p.done()
		if err != nil {
			return limitsErr(err, s)
		}
		return printPlan(c, s, plan)
	}
	rep, err := r.Sweep(ctx)
	p.done()
	if err != nil && rep.Scanned == 0 {
		return limitsErr(err, s)
	}
	if perr := printReport(c, s, rep); perr != nil {
		return perr
	}
	if err != nil {
		return fail(exitError, err, "the sweep stopped part way: what it reclaimed before stands, and the report above counts it")
	}
	return nil
}

// use is what a command does with the reclaimer it builds.
type use int

const (
	// suggests reads finished jobs: no rule runs, nothing is announced.
	suggests use = iota
	// plans decides and writes nothing (a dry run, a shadow service): the
	// parent rules are planned, nothing is announced.
	plans
	// sweeps writes: Redis, where the markers may go, must answer before
	// anything is written, and each reclaim is announced.
	sweeps
)

// reclaimConfig is the reclaimer the settings describe, recording its
// metrics on mp (nil: none): over the guard of the mapped table, with the
// source, the limits table, the decision's settings and the command's
// logger; when it plans or sweeps, with the config file's parent rules;
// when it sweeps, with the notices of --notices.
func (c *conns) reclaimConfig(ctx context.Context, s *settings, mp metric.MeterProvider, u use) (*jobguard.Guard, reclaim.Config, error) {
	var cfg reclaim.Config
	guard, err := c.guard(ctx, s, mp)
	if err != nil {
		return nil, cfg, err
	}
	if err := c.openRedis(ctx, s, u == sweeps); err != nil {
		return nil, cfg, err
	}
	// The limits table's name first: a malformed one is a usage error
	// (exit 2), whatever else the mapping lacks.
	limits, err := c.limits(s)
	if err != nil {
		return nil, cfg, err
	}
	src, err := c.source(guard, s)
	if err != nil {
		return nil, cfg, err
	}
	cfg = reclaim.Config{Guard: guard, DB: c.pool, Redis: c.redis, Source: src, Limits: limits, NoProgress: s.NoProgress,
		SweepTimeout: s.SweepTimeout, Interval: s.Interval, PageSize: s.PageSize, Logger: c.log, MeterProvider: mp,
		Brake: s.Brake}
	if u == suggests {
		return guard, cfg, nil
	}
	if s.Rescue {
		cfg.Workers = &lease.Workers{Schema: s.Table.Schema, Table: s.WorkersTable}
	}
	if cfg.OnReclaim, err = parentRules(s); err != nil {
		return nil, cfg, err
	}
	if u == sweeps {
		if cfg.Notices, err = c.notices(guard, s); err != nil {
			return nil, cfg, err
		}
	}
	return guard, cfg, nil
}

// source is the source --source names: the queue's, or the jobs table's.
func (c *conns) source(guard *jobguard.Guard, s *settings) (reclaim.Source, error) {
	queue, err := c.queueSource(s)
	if err != nil || queue != nil {
		return queue, err
	}
	src, err := reclaim.NewTableSource(guard, c.pool)
	if err != nil {
		return nil, fail(exitError, err, "map the column of the current attempt's start (--started-at-column), "+
			"or read the starts from the queue (--source bullmq or river)")
	}
	return src, nil
}

// notices is the publisher of --notices, nil when off.
func (c *conns) notices(guard *jobguard.Guard, s *settings) (reclaim.Notifier, error) {
	var t watch.Transport
	switch s.Notices {
	case noticesRedis:
		t.Redis = c.redis
	case noticesPostgres:
		t.Postgres = c.pool
	default:
		return nil, nil
	}
	pub, err := watch.NewPublisher(guard, t)
	if err != nil {
		return nil, usageErr("--notices %s: %v", s.Notices, err)
	}
	return pub, nil
}

// parentRules are the config file's parent rules, as reclaim runs them.
func parentRules(s *settings) (map[string]reclaim.ParentRule, error) {
	if len(s.ParentRules) == 0 {
		return nil, nil
	}
	rules := make(map[string]reclaim.ParentRule, len(s.ParentRules))
	for typ, p := range s.ParentRules {
		rule, err := reclaim.SetParent(p)
		if err != nil {
			return nil, usageErr("%s: parent_rules[%q]: %v", s.configName(), typ, err)
		}
		rules[typ] = rule
	}
	return rules, nil
}

// plannedJSON is one job of a plan, as --json prints it.
type plannedJSON struct {
	ID             string   `json:"id"`
	Type           string   `json:"type"`
	Generation     int64    `json:"generation"`
	Decision       string   `json:"decision"`
	RuntimeSeconds *float64 `json:"runtime_seconds"`
	LimitSeconds   *float64 `json:"limit_seconds"`
	StalledSeconds *float64 `json:"stalled_for_seconds"`
	Why            string   `json:"why"`
}

// printPlan writes a dry run's plan: a line per job, then the counts.
func printPlan(c *cli, s *settings, plan reclaim.Plan) error {
	if s.JSON {
		jobs := make([]plannedJSON, len(plan.Jobs))
		for i, j := range plan.Jobs {
			jobs[i] = plannedJSON{ID: j.ID, Type: j.Type, Generation: j.Generation, Decision: j.Decision.String(),
				RuntimeSeconds: optSeconds(j.Runtime), LimitSeconds: optSeconds(j.Limit),
				StalledSeconds: optSeconds(j.StalledFor), Why: c.red.String(j.String())}
		}
		return printJSON(c.stdout, struct {
			DryRun bool          `json:"dry_run"`
			Jobs   []plannedJSON `json:"jobs"`
			Report reportJSON    `json:"report"`
		}{true, jobs, toReportJSON(plan.Report)})
	}
	// The jobs the source never lists for want of a start are in the
	// report only.
	unlisted := plan.Report.NoStartTime
	for _, j := range plan.Jobs {
		if j.Decision == reclaim.DecisionNoStartTime {
			unlisted--
		}
	}
	unlistedNote := func() {
		if unlisted > 0 {
			fmt.Fprintf(c.stdout, "%d running jobs have no start time and are not listed: never reclaimed (counted as no_start_time).\n", unlisted)
		}
	}
	if len(plan.Jobs) == 0 {
		what := "no job listed"
		if s.Source == sourceTable {
			what += " (the table source lists only the running jobs over their type's limit)"
		}
		fmt.Fprintf(c.stdout, "%s. Dry run: nothing was written.\n", strings.ToUpper(what[:1])+what[1:])
		unlistedNote()
		return nil
	}
	t := newTable(c.stdout, "JOB", "TYPE", "RUNTIME", "LIMIT", "STALLED FOR", "DECISION", "WHY")
	counts := map[reclaim.Decision]int{}
	for _, j := range plan.Jobs {
		counts[j.Decision]++
		t.row(j.ID, orDash(j.Type), dur(j.Runtime), limitText(j.Limit), dur(j.StalledFor), j.Decision.String(), c.red.String(j.String()))
	}
	if err := t.flush(); err != nil {
		return err
	}
	var parts []string
	for d := reclaim.DecisionSourceError; d <= reclaim.DecisionReclaim; d++ {
		if n := counts[d]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, d))
		}
	}
	fmt.Fprintf(c.stdout, "\n%d listed: %s. Dry run: nothing was written.\n", len(plan.Jobs), strings.Join(parts, ", "))
	unlistedNote()
	printUntyped(c, s, plan.Report)
	return nil
}

// printUntyped says in words why the jobs without a type have no limit,
// and what to do.
func printUntyped(c *cli, s *settings, rep reclaim.Report) {
	if rep.Untyped == 0 {
		return
	}
	if s.Table.TypeColumn == "" {
		fmt.Fprintf(c.stdout, "%d jobs have no type: the mapping has no type column, so no per-type limit matches them; "+
			"map it (--type-column, or \"type_column\" in the config file), or give the type \"\" a limit "+
			"(jobguard limits set \"\" 30m).\n", rep.Untyped)
		return
	}
	fmt.Fprintf(c.stdout, "%d jobs have the empty type \"\", which no per-type limit matches: give them a type, "+
		"or give the type \"\" a limit (jobguard limits set \"\" 30m).\n", rep.Untyped)
}

// reportJSON is a reclaim.Report, as --json prints it.
type reportJSON struct {
	Scanned         int      `json:"scanned"`
	Reclaimed       int      `json:"reclaimed"`
	ReclaimedIDs    []string `json:"reclaimed_ids"`
	WouldReclaim    int      `json:"would_reclaim"`
	WouldReclaimIDs []string `json:"would_reclaim_ids"`
	Rescued         int      `json:"rescued"`
	RescuedIDs      []string `json:"rescued_ids"`
	WouldRescue     int      `json:"would_rescue"`
	WithinLimit     int      `json:"within_limit"`
	Progressing     int      `json:"progressing"`
	Stale           int      `json:"stale"`
	NotActive       int      `json:"not_active"`
	NoStartTime     int      `json:"no_start_time"`
	UnknownType     int      `json:"unknown_type"`
	SourceErrors    int      `json:"source_errors"`
	LostRace        int      `json:"lost_race"`
	Locked          int      `json:"locked"`
	RuleErrors      int      `json:"rule_errors"`
	MarkerErrors    int      `json:"marker_errors"`
	NoticeErrors    int      `json:"notice_errors"`
	Paused          int      `json:"paused"`
	Braked          int      `json:"braked"`
	BrakeReason     string   `json:"brake_reason"`
}

func toReportJSON(r reclaim.Report) reportJSON {
	nonNil := func(ids []string) []string {
		if ids == nil {
			return []string{}
		}
		return ids
	}
	return reportJSON{Scanned: r.Scanned, Reclaimed: r.Reclaimed, ReclaimedIDs: nonNil(r.ReclaimedIDs),
		WouldReclaim: r.WouldReclaim, WouldReclaimIDs: nonNil(r.WouldReclaimIDs), WithinLimit: r.WithinLimit,
		Progressing: r.Progressing, Stale: r.Stale, NotActive: r.NotActive, NoStartTime: r.NoStartTime,
		UnknownType: r.UnknownType, SourceErrors: r.SourceErrors, LostRace: r.LostRace, Locked: r.Locked,
		RuleErrors: r.RuleErrors, MarkerErrors: r.MarkerErrors, NoticeErrors: r.NoticeErrors,
		Paused: r.Paused, Braked: r.Braked, BrakeReason: r.BrakeReason,
		Rescued: r.Rescued, RescuedIDs: nonNil(r.RescuedIDs), WouldRescue: r.WouldRescue}
}

// printReport writes a sweep's report: what it reclaimed, then every
// counter.
func printReport(c *cli, s *settings, rep reclaim.Report) error {
	if s.JSON {
		return printJSON(c.stdout, toReportJSON(rep))
	}
	if rep.Reclaimed > 0 {
		fmt.Fprintf(c.stdout, "Reclaimed %d: %s\n\n", rep.Reclaimed, strings.Join(rep.ReclaimedIDs, ", "))
	} else {
		fmt.Fprintf(c.stdout, "Reclaimed nothing.\n\n")
	}
	t := newTable(c.stdout, "scanned", fmt.Sprint(rep.Scanned))
	for _, n := range rep.Counts() {
		// A type in shadow has its would-reclaims in a live sweep too; a
		// paused type and a braked sweep are shown when they count.
		if (!n.Shadow || n.N > 0) && (!n.Rare || n.N > 0) {
			t.row(n.Words, fmt.Sprint(n.N))
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	if rep.Braked > 0 {
		fmt.Fprintf(c.stdout, "\nBraked: %d jobs held back: %s. Find what stalled them, then "+
			"'jobguard sweep --release-brake' reclaims them at once.\n", rep.Braked, rep.BrakeReason)
	}
	printUntyped(c, s, rep)
	return nil
}
