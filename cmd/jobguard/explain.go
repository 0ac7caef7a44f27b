package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jobguard/jobguard/internal/redact"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
	"github.com/jobguard/jobguard/jobguard/marker"
	"github.com/jobguard/jobguard/reclaim"
)

var explainCommand = &command{
	name:  "explain",
	args:  "<job-id>",
	short: "what a sweep would decide for one job right now, and why",
	long: `
Explain reads one job and says what a reclaim sweep would do with it right
now, and why, in words: its row (status, generation, failure reason, start
of its current attempt, last progress), the limit of its type, the reclaim
marker in Redis if any, what the start guard would say to a worker starting
it, and the sweep's decision (reclaim.Reclaimer.Plan over this one job).
It writes nothing.

A job that no longer runs is said plainly to be so: FAILED, by whom (a
sweep's reclaim, as its failure reason or its marker says, or its own
execution or an operator) and when (its updated_at), as the decision
reclaimed or failed; or COMPLETED, and when (completed).

With --source bullmq or river it also reads the queue's listing of the job:
a job the queue does not list as active is never considered by a sweep over
it. Give explain the same settings as the reclaimer (--no-progress, the
limits table, the source), or the same config file, so that its answer is
the reclaimer's.

Exit codes: 0 explained, 1 error (including a marker that could not be
read: the rest is printed), 2 a malformed job id, 3 no such job.`,
	flags: func(f *flags, s *settings) {
		f.commonGroups(s)
		f.decisionGroup(s, false)
		f.sourceGroup(s)
		f.outputGroup(s, false)
	},
	run: explain,
}

// explanation is what explain found, as --json prints it.
type explanation struct {
	ID            string     `json:"id"`
	Table         string     `json:"table"`
	Status        string     `json:"status"`
	Generation    *int64     `json:"generation"`
	Type          string     `json:"type"`
	ParentID      string     `json:"parent_id,omitempty"`
	FailureReason string     `json:"failure_reason"`
	StartedAt     *time.Time `json:"started_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
	ReadAt        time.Time  `json:"read_at"`
	// Listed is whether the queue lists the job as active; nil for the
	// table source.
	Listed         *bool        `json:"listed,omitempty"`
	QueueStartedAt *time.Time   `json:"queue_started_at,omitempty"`
	LimitSeconds   *float64     `json:"limit_seconds"`
	NoProgressSecs float64      `json:"no_progress_seconds"`
	RuntimeSeconds *float64     `json:"runtime_seconds"`
	StalledSeconds *float64     `json:"stalled_for_seconds"`
	Marker         *foundMarker `json:"marker"`
	MarkerError    string       `json:"marker_error,omitempty"`
	StartGuard     string       `json:"start_guard"`
	StartGuardWhy  string       `json:"start_guard_why"`
	Decision       string       `json:"decision"`
	Why            string       `json:"why"`
	// Mode is the mode of the job's type when it is paused ("off") or in
	// shadow; absent when it reclaims.
	Mode string `json:"mode,omitempty"`
	// UnstartedJobs counts the table's running jobs without a start time,
	// which the table source never lists; nil for a queue source.
	UnstartedJobs   *int   `json:"unstarted_jobs,omitempty"`
	UnstartedError  string `json:"unstarted_error,omitempty"`
	markerReadError error
	limit           time.Duration
}

// foundMarker is a reclaim marker, as --json prints it.
type foundMarker struct {
	Key        string    `json:"key"`
	Generation int64     `json:"generation"`
	Reason     string    `json:"reason"`
	At         time.Time `json:"at"`
}

func explain(ctx context.Context, c *cli, s *settings, args []string) error {
	cn, guard, id, err := c.openJob(ctx, s, "explain", args)
	if err != nil {
		return err
	}
	defer cn.close()
	if err := cn.openRedis(ctx, s, false); err != nil {
		return err
	}
	queue, err := cn.queueSource(s)
	if err != nil {
		return err
	}
	limits, err := cn.limits(s)
	if err != nil {
		return err
	}
	quiet := slog.New(slog.DiscardHandler)
	src := &oneJob{guard: guard, db: cn.pool, id: id, queue: queue, queueTodo: cn.queueTodo(s)}
	r, err := reclaim.New(reclaim.Config{Guard: guard, DB: cn.pool, Redis: cn.redis, Source: src, Limits: limits,
		NoProgress: s.NoProgress, PageSize: s.PageSize, SweepTimeout: s.SweepTimeout, Logger: quiet})
	if err != nil {
		return err
	}
	plan, err := r.Plan(ctx)
	switch {
	case errors.Is(err, errJobNotFound):
		return notFound(guard, id)
	case err != nil:
		return limitsErr(err, s)
	case len(plan.Jobs) != 1:
		return fmt.Errorf("the plan of job %s holds %d jobs, not one", id, len(plan.Jobs))
	}
	starts, err := jobguard.NewStartGuard(guard, cn.redis, jobguard.StartGuardConfig{OnLookupError: jobguard.FailClosed, Logger: quiet})
	if err != nil {
		return err
	}
	e := explained(ctx, guard, starts, src, plan.Jobs[0], s)
	e.redact(c.red)
	if s.JSON {
		err = printJSON(c.stdout, e)
	} else {
		err = e.print(c, guard, s)
	}
	if err != nil {
		return err
	}
	if e.markerReadError != nil {
		if starts.Markers() == nil {
			return fail(exitError, fmt.Errorf("the reclaim marker could not be read from %s: %w", marker.TableName, e.markerReadError),
				"the rest is printed above; check that jobguard/marker.Migration was applied in %s", cn.where)
		}
		return fail(exitError, fmt.Errorf("the reclaim marker could not be read from Redis at %s: %w", cn.redisWhere, e.markerReadError),
			"the rest is printed above; %s", cn.redisTodo)
	}
	return nil
}

// markerKey names where job id's marker is kept: its Redis key, or its
// row of the marker table.
func markerKey(starts *jobguard.StartGuard, guard *jobguard.Guard, id string) string {
	if m := starts.Markers(); m != nil {
		return m.Key(id)
	}
	return fmt.Sprintf("%s row (%s, %s)", marker.TableName, guard.TableKey(), id)
}

// explained gathers the explanation of planned, the one job of src.
func explained(ctx context.Context, guard *jobguard.Guard, starts *jobguard.StartGuard, src *oneJob, planned reclaim.PlannedJob, s *settings) *explanation {
	row, t := src.row, guard.Table()
	e := &explanation{ID: row.ID, Table: t.QualifiedName(), Status: row.Status, Type: row.Type, ParentID: row.ParentID,
		FailureReason: row.FailureReason, UpdatedAt: row.UpdatedAt, ReadAt: row.ReadAt,
		LimitSeconds: optSeconds(planned.Limit), NoProgressSecs: seconds(s.NoProgress),
		RuntimeSeconds: optSeconds(planned.Runtime), StalledSeconds: optSeconds(planned.StalledFor),
		Decision: planned.Decision.String(), Why: planned.String(), limit: planned.Limit}
	if planned.Mode != reclaim.ModeReclaim {
		e.Mode = string(planned.Mode)
	}
	if guard.Fenced() {
		e.Generation = &row.Generation
	}
	if !row.StartedAt.IsZero() {
		e.StartedAt = &row.StartedAt
	}
	if src.queue != nil {
		e.queueListing(src, planned)
	}

	m, found, err := starts.Marker(ctx, src.db, row.ID)
	switch {
	case err != nil:
		e.MarkerError, e.markerReadError = err.Error(), err
	case found:
		e.Marker = &foundMarker{Key: markerKey(starts, guard, row.ID), Generation: m.Generation, Reason: m.Reason, At: m.At}
	}
	e.StartGuard, e.StartGuardWhy = startVerdict(starts.Check(ctx, src.db, row.ID), row, t)

	if src.queue == nil && t.StartedAtColumn != "" {
		e.unstarted(ctx, guard, src.db, planned)
	}
	// A job that no longer runs says what became of it, whatever the plan
	// made of its type or its listing.
	if d, why, ok := finished(row, t, guard.Shared().ReclaimedReason, e.Marker); ok {
		e.Decision, e.Why = d, why
	}
	return e
}

// queueListing says whether the queue lists the job as active, and when
// the latest attempt it lists started: a job it does not list, a sweep
// over it never considers.
func (e *explanation) queueListing(src *oneJob, planned reclaim.PlannedJob) {
	listed := len(src.listings) > 0
	e.Listed = &listed
	for _, l := range src.listings {
		if !l.StartedAt.IsZero() && (e.QueueStartedAt == nil || l.StartedAt.After(*e.QueueStartedAt)) {
			e.QueueStartedAt = &l.StartedAt
		}
	}
	if !listed {
		e.Decision = "not_listed"
		e.Why = fmt.Sprintf("the %s source does not list it as active: a sweep over it never considers this job "+
			"(on its row alone: %s)", sourceName(src.queue), planned.String())
	}
}

// unstarted says, for the table source, which lists no running job
// without a start, whether this job is one, and how many there are, which
// every sweep counts.
func (e *explanation) unstarted(ctx context.Context, guard *jobguard.Guard, db jobguard.DB, planned reclaim.PlannedJob) {
	if planned.Decision == reclaim.DecisionNoStartTime {
		e.Why = "its row has no start time: the table source never lists it, so no sweep reclaims it; " +
			"every sweep counts it as no_start_time (StartGuard.Start stamps the start)"
	}
	if ts, err := reclaim.NewTableSource(guard, db); err != nil {
		e.UnstartedError = err.Error()
	} else if n, err := ts.CountUnstarted(ctx); err != nil {
		e.UnstartedError = err.Error()
	} else {
		e.UnstartedJobs = &n
	}
}

// redact masks passwords in what the explanation quotes of the servers:
// the row's texts and the marker's reason, and the errors it read, each
// apart (the command's output is masked again, line by line). A worker may
// have failed its job with an error that held a URL.
func (e *explanation) redact(r *redact.Redactor) {
	for _, p := range []*string{&e.ID, &e.Type, &e.ParentID, &e.FailureReason, &e.MarkerError, &e.StartGuardWhy,
		&e.UnstartedError, &e.Why} {
		*p = r.String(*p)
	}
	if e.Marker != nil {
		e.Marker.Reason = r.String(e.Marker.Reason)
	}
}

// printMode says the mode of the job's type when it is paused or in
// shadow, and nothing when it reclaims.
func (e *explanation) printMode(line func(k, v string)) {
	switch reclaim.Mode(e.Mode) {
	case reclaim.ModeOff:
		line("mode", fmt.Sprintf("off: paused; no sweep reclaims its jobs ('jobguard limits resume %s')", e.Type))
	case reclaim.ModeShadow:
		line("mode", fmt.Sprintf("shadow: sweeps count it as would reclaim and write nothing ('jobguard limits resume %s')", e.Type))
	}
}

// finished says what became of a job that is no longer running: FAILED,
// by whom (a sweep's reclaim, as its failure reason or its marker says, or
// its own execution or an operator) and when (its updated_at, which the
// failing write stamped); or COMPLETED, and when. ok is false for a job
// that is QUEUED or PROCESSING.
func finished(row *jobset.Job, t jobguard.Table, reclaimedReason string, m *foundMarker) (decision, why string, ok bool) {
	when := fmt.Sprintf("at %s (%s ago)", row.UpdatedAt.UTC().Format(time.RFC3339), dur(row.ReadAt.Sub(row.UpdatedAt)))
	const untouched = "; no sweep touches it again ('jobguard retry' runs it again)"
	switch row.Status {
	case t.Statuses.Completed:
		return "completed", fmt.Sprintf("%s %s: finished; no sweep touches it", row.Status, when), true
	case t.Statuses.Failed:
	default:
		return "", "", false
	}
	byReason := reclaimedReason != "" && strings.HasPrefix(row.FailureReason, reclaimedReason)
	byMarker := m != nil && m.Generation >= row.Generation
	reason := "none"
	if row.FailureReason != "" {
		reason = fmt.Sprintf("%q", row.FailureReason)
	}
	switch {
	case byReason && byMarker:
		return "reclaimed", fmt.Sprintf("%s %s, reclaimed by a sweep: failure reason %s, marker of generation %d%s",
			row.Status, when, reason, m.Generation, untouched), true
	case byReason:
		return "reclaimed", fmt.Sprintf("%s %s, reclaimed by a sweep: failure reason %s%s", row.Status, when, reason, untouched), true
	case byMarker:
		return "reclaimed", fmt.Sprintf("%s %s, reclaimed by a sweep: marker of generation %d (the failure reason %s was written after)%s",
			row.Status, when, m.Generation, reason, untouched), true
	}
	return "failed", fmt.Sprintf("%s %s, by its own execution or an operator, not by a sweep: failure reason %s%s",
		row.Status, when, reason, untouched), true
}

// startVerdict says what the start guard's Check found, in a word and in
// words.
func startVerdict(err error, row *jobset.Job, t jobguard.Table) (string, string) {
	var re *jobguard.ReclaimedError
	switch {
	case errors.As(err, &re):
		why := fmt.Sprintf("reclaimed, says the %s: %q", re.Source, re.Reason)
		if re.Source == "marker" {
			why += fmt.Sprintf(" (generation %d)", re.Generation)
		}
		return "refuses", why + "; a worker's Start fails with a permanent error"
	case errors.Is(err, jobguard.ErrGuardUnavailable):
		return "unknown", fmt.Sprintf("cannot tell: %v", err)
	case err != nil:
		return "unknown", err.Error()
	case row.Status == t.Statuses.Queued || row.Status == t.Statuses.Processing:
		return "allows", "no reclaim recorded, neither in the failure reason nor in a marker of its generation"
	}
	return "allows", fmt.Sprintf("no reclaim recorded; but Start takes only a %s or %s job, and this one is %s",
		t.Statuses.Queued, t.Statuses.Processing, row.Status)
}

// print writes the explanation as aligned lines.
func (e *explanation) print(c *cli, guard *jobguard.Guard, s *settings) error {
	t := guard.Table()
	tw := newTable(c.stdout, "job", e.ID)
	line := func(k, v string) { tw.row(k, v) }
	at := func(ts time.Time) string {
		return fmt.Sprintf("%s (%s ago)", ts.UTC().Format(time.RFC3339), dur(e.ReadAt.Sub(ts)))
	}
	line("table", e.Table)
	line("status", e.Status)
	if e.Generation != nil {
		line("generation", fmt.Sprint(*e.Generation))
	} else {
		line("generation", "- (no generation column: status-only mode)")
	}
	if t.TypeColumn != "" {
		line("type", orDash(e.Type))
	}
	if t.ParentIDColumn != "" {
		line("parent", orDash(e.ParentID))
	}
	switch {
	case t.StartedAtColumn == "":
		line("started", "- (no started-at column)")
	case e.StartedAt == nil:
		line("started", "-")
	default:
		line("started", at(*e.StartedAt))
	}
	line("last progress", at(e.UpdatedAt))
	line("failure reason", orDash(e.FailureReason))
	if e.Listed != nil {
		q := fmt.Sprintf("not listed as active by the %s source", s.Source)
		if *e.Listed {
			q = fmt.Sprintf("listed as active by the %s source", s.Source)
			if e.QueueStartedAt != nil {
				q += ", attempt started " + e.QueueStartedAt.UTC().Format(time.RFC3339)
			}
		}
		line("queue", q)
	}
	if e.limit != 0 {
		line("limit", fmt.Sprintf("%v (type %q, %s)", e.limit, e.Type, limitsName(s)))
	} else {
		line("limit", fmt.Sprintf("none: type %q has no row in %s", e.Type, limitsName(s)))
	}
	e.printMode(line)
	line("no progress", fmt.Sprintf("%v (reclaimed only after updated_at stands still this long)", s.NoProgress))
	switch {
	case e.MarkerError != "":
		line("marker", "cannot read: "+e.MarkerError)
	case e.Marker == nil:
		line("marker", "none")
	default:
		line("marker", fmt.Sprintf("generation %d, %q, written %s (key %s)", e.Marker.Generation, e.Marker.Reason,
			e.Marker.At.UTC().Format(time.RFC3339), e.Marker.Key))
	}
	line("start guard", e.StartGuard+": "+e.StartGuardWhy)
	switch {
	case e.UnstartedError != "":
		line("unstarted", "cannot count the running jobs without a start time: "+e.UnstartedError)
	case e.UnstartedJobs != nil && *e.UnstartedJobs > 0:
		line("unstarted", fmt.Sprintf("%d running jobs in the table have no start time: never listed, never reclaimed, "+
			"counted by every sweep as no_start_time", *e.UnstartedJobs))
	}
	line("decision", e.Decision)
	line("why", e.Why)
	return tw.flush()
}
