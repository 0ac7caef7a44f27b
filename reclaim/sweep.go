package reclaim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jobguard/jobguard/internal/safe"
	"github.com/jobguard/jobguard/jobguard/jobset"
)

// Sweep runs one pass. It reads the limits (and the types' modes) once,
// then takes the source's listings a page at a time; for each page it reads
// the rows it needs in one query (none for a TableSource, whose listings
// carry their rows) and decides every job (see the package doc for the
// rule). The jobs chosen for reclaim are held until every page is seen, so
// that the Brake can cap them (the stalled longest first); then, a page at
// a time, it fails them in one conditional write that skips rows another
// transaction holds, runs their parent rules in the same transaction, and
// after the commit writes their markers and publishes their notices. When
// the source fails part way, the jobs of the pages it handed over are
// still reclaimed.
//
// Without parent rules a page costs two statements, the read and the write,
// beside the limits (and a TableSource's active types) read once per sweep,
// and the count of the running jobs when a share cap of the brake could
// bind. Over a TableSource, the limits (a TableLimits on the source's
// handle), the active types and the count of the jobs without a start
// (see below) are one batch, one round trip, sent outside any
// transaction;
// parent rules add the transaction's BEGIN and COMMIT, its lock_timeout, a
// savepoint, for each rule a savepoint of its own with its timeouts set
// before it and statement_timeout set back after it (four statements),
// and what each rule sends (SetParent: one statement per type),
// and, for each job whose rule failed, a short transaction of its own. The
// parent rules of one sweep wait for rows other transactions hold, and
// run their statements, no longer than LivenessTimeout all together, and
// never longer than half the deadline, so the jobs whose parents are free commit within it however
// many parents are held.
//
// The sweep stops at Config.SweepTimeout. The error is non-nil when the
// limits or the source cannot be read, or a page's read or write fails, or
// the deadline passed: pages handled before stand, and the report counts
// them. Per-job problems are counted and summed up in the sweep's one log
// line, not returned. A panic in the code the sweep was given is one of
// these: a parent rule's fails its jobs, a notifier's its notices, and a
// source's or the limits' the sweep (the error wraps a
// *jobguard.PanicError); none reaches the caller as a panic. So is a source,
// the limits, a count or a notifier that ignores its context: it is
// abandoned a second (safe.Grace) after its context ends, and the error
// says so.
//
// A source that never lists the active jobs without a start time (an
// UnstartedCounter, as TableSource is) is asked for their number, which
// goes into Report.NoStartTime when the listing succeeded: no sweep can
// reclaim them, and every sweep says how many there are. A TableSource's
// count travels in the opening batch under a statement timeout of 50 ms
// (the session's when shorter), so that a slow count holds the listing
// back no longer; one that runs out of it there, like any other source's,
// is counted after the reclaims, with the sweep's time. A count that fails
// is named in the summary line, at warn, and does not fail the sweep.
//
// With Config.Shadow set, the sweep decides the same and writes nothing: the
// jobs it would reclaim are counted in Report.WouldReclaim and logged.
func (r *Reclaimer) Sweep(ctx context.Context) (Report, error) {
	// The duration is real elapsed time, whatever clock Config.Now is.
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.SweepTimeout)
	defer cancel()
	p := &pass{dry: r.cfg.Shadow, waitUntil: start.Add(r.waitBudget()), listUntil: start.Add(r.listBudget()),
		released: r.released.Swap(false)}
	err := r.run(ctx, p)
	if err != nil {
		err = fmt.Errorf("reclaim: sweep: %w", err)
	}
	took := time.Since(start)
	r.met.swept(ctx, p.rep, err, took)
	r.summarize(ctx, p, err, took)
	return p.rep, err
}

// pass is one sweep, or one plan, under way.
type pass struct {
	rep   Report
	notes notes
	// dry decides and writes nothing: no row, parent, marker or notice.
	dry bool
	// plan, when set, receives every job's decision.
	plan *[]PlannedJob
	// waitUntil ends the time the pass's parent rules may spend, all
	// together, waiting for rows other transactions hold (waitBudget after
	// its start); after it, a held row fails its rule at once.
	waitUntil time.Time
	// listUntil ends the source's listing (listBudget after the start; the
	// zero time: the sweep's deadline), leaving the rest of the deadline to
	// write what the pages handed over decided.
	listUntil time.Time
	// modes are the job types' modes, read with the limits.
	modes map[string]Mode
	// pending are the jobs the pages decided to reclaim, held for the
	// brake until every page is seen (see reclaimHeld).
	pending []candidate
	// listed counts the jobs listed, by type: a queue's running jobs.
	listed map[string]int
	// dbAt and wallAt are the latest reading of the database's clock (a
	// row's ReadAt) and the reclaimer's beside it.
	dbAt, wallAt time.Time
	// released: the brake is released for this pass.
	released bool
	// drift is the clocks' drift since the last sweep, once drifted (see
	// Reclaimer.drift).
	drift   time.Duration
	drifted bool
}

// waitBudget is how long the parent rules of one sweep may wait, all
// together, for rows other transactions hold: LivenessTimeout, and at most
// half the deadline, so that waiting never takes the time the sweep needs
// for its jobs whose parents are free.
func (r *Reclaimer) waitBudget() time.Duration {
	return min(r.cfg.LivenessTimeout, r.cfg.SweepTimeout/2)
}

// listBudget is how long a sweep's source may list: three quarters of the
// deadline. The decisions are held until the listing ends (for the brake),
// so a listing that ran to the deadline would leave no time to write them,
// and a queue too large to list in one sweep would never be reclaimed.
func (r *Reclaimer) listBudget() time.Duration {
	return r.cfg.SweepTimeout / 4 * 3
}

// listGrace is how long past the listing's deadline a source (or a count)
// that ignores its context is waited for before it is abandoned:
// safe.Grace, and at most an eighth of the deadline, so that the quarter
// of it the listing leaves to the writes is theirs.
func (r *Reclaimer) listGrace() time.Duration {
	return min(safe.Grace, r.cfg.SweepTimeout/8)
}

// run is a sweep without its deadline, metrics and summary. The limits and
// the source may be the caller's code: a panic in them fails the pass as
// an error does (a parent rule's fails only its jobs; see attempt).
func (r *Reclaimer) run(ctx context.Context, p *pass) error {
	return safe.Call(func() error {
		// A rescue that fails leaves the reclaims to go on, and the
		// other way round.
		rescueErr := r.rescue(ctx, p)
		return errors.Join(rescueErr, r.list(ctx, p))
	})
}

// list reads the limits and hands the source's pages to page. The limits,
// the source and its count are the caller's code, called through
// safe.Bounded: one that ignores its context is abandoned safe.Grace past
// the sweep's deadline, and the sweep fails (or, for the count, notes it)
// with an error wrapping safe.ErrAbandoned.
func (r *Reclaimer) list(ctx context.Context, p *pass) error {
	table, _ := r.cfg.Source.(*TableSource)
	limits, open, err := r.open(ctx, p, table)
	if err != nil {
		return err
	}
	p.notes.noLimits = len(limits) == 0
	q := Query{Limits: limits, PageSize: r.cfg.PageSize}
	// An abandoned source may still call page: the gate turns it away once
	// the sweep has stopped waiting, and waits for a page under way.
	var g gate
	lctx, cancel := ctx, context.CancelFunc(func() {})
	if !p.listUntil.IsZero() {
		lctx, cancel = context.WithDeadline(ctx, p.listUntil)
	}
	err = safe.Bounded(lctx, r.listGrace(), func(lctx context.Context) error {
		page := func(page []ActiveJob) error {
			return g.run(func() error { return r.page(lctx, p, page, limits) })
		}
		if open != nil {
			return table.overdue(lctx, q, open.types, page)
		}
		return r.cfg.Source.Active(lctx, q, page)
	})
	cancel()
	g.close()
	// What the pages decided to reclaim, braked, also when the source
	// failed part way: the pages it handed over stand.
	if herr := r.reclaimHeld(ctx, p); herr != nil {
		return errors.Join(err, herr)
	}
	if err != nil {
		return err
	}
	if open != nil && open.counted {
		p.rep.NoStartTime += open.unstarted
		return nil
	}
	r.countUnstarted(ctx, p)
	return nil
}

// open reads the limits (and the types' modes into p). Over the jobs table
// (table not nil), the limits and the active types travel as one batch
// (see openTable), returned as open.
func (r *Reclaimer) open(ctx context.Context, p *pass, table *TableSource) (limits map[string]time.Duration, open *opening, err error) {
	err = safe.Bounded(ctx, safe.Grace, func(ctx context.Context) error {
		if table != nil && r.limitsWith(table) {
			if o, ok := r.openTable(ctx, table, true); ok {
				open, limits, p.modes = o, o.limits, o.modes
				return nil
			}
		}
		l, m, err := readLimits(ctx, r.cfg.Limits)
		if err != nil {
			return err
		}
		limits, p.modes = l, m
		if table != nil {
			// Limits of another handle, or the caller's own: the types
			// are read in the batch alone.
			open, _ = r.openTable(ctx, table, false)
		}
		return nil
	})
	return limits, open, err
}

// countUnstarted adds the jobs the source never lists for want of a start,
// when the opening batch did not count them: counted after the reclaims,
// which matter more, and a count that fails is noted, not the sweep's
// failure. One that takes under half the count's budget goes back into
// the opening batch from the next sweep on (see openTable).
func (r *Reclaimer) countUnstarted(ctx context.Context, p *pass) {
	c, ok := r.cfg.Source.(UnstartedCounter)
	if !ok {
		return
	}
	var n int
	start := time.Now()
	err := safe.Bounded(ctx, safe.Grace, func(ctx context.Context) error {
		m, err := c.CountUnstarted(ctx)
		if err == nil {
			n = m
		}
		return err
	})
	if err == nil && time.Since(start) < r.countBudget()/2 {
		r.countApart.Store(false)
	}
	switch {
	case err == nil:
		p.rep.NoStartTime += n
	case ctx.Err() == nil || errors.Is(err, safe.ErrAbandoned):
		p.notes.unstartedErr = err
	}
}

// gate lets the calls of an abandoned source's page callback through one
// at a time, and none once closed.
type gate struct {
	mu     sync.Mutex
	closed bool
}

// errGateClosed is what a page handed over after the sweep stopped
// waiting for its source gets back.
var errGateClosed = errors.New("the sweep has stopped waiting for its source")

func (g *gate) run(fn func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return errGateClosed
	}
	return fn()
}

// close turns away every later call, once the one under way has returned.
func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// page reads and decides one page of listings. The jobs it decides to
// reclaim are held for the brake (see reclaimHeld), unless their type is
// paused (ModeOff: counted in Paused) or in shadow (ModeShadow: counted in
// WouldReclaim).
func (r *Reclaimer) page(ctx context.Context, p *pass, listed []ActiveJob, limits map[string]time.Duration) error {
	now := r.cfg.Now()
	ruleOf := func(jobType string) rule {
		limit, known := limits[jobType]
		return rule{limit: limit, known: known, now: now, noProgress: r.cfg.NoProgress}
	}
	jobs := r.fold(listed)
	p.rep.Scanned += len(jobs)
	if err := r.readRows(ctx, jobs, ruleOf); err != nil {
		return err
	}
	p.readClocks(jobs, r.elapsed())
	if p.listed == nil {
		p.listed = map[string]int{}
	}
	st := r.cfg.Guard.Table().Statuses
	for _, l := range jobs {
		p.listed[l.Type]++
		rl := ruleOf(l.Type)
		d := decide(l, l.Row, rl, st)
		mode := modeOf(p.modes, l.Type)
		if p.plan != nil {
			j := planned(l, d, rl)
			j.Mode = mode
			*p.plan = append(*p.plan, j)
		}
		switch {
		case d != DecisionReclaim:
			r.count(ctx, &p.rep, &p.notes, l, d)
		case mode == ModeOff:
			p.rep.Paused++
			if r.debug(ctx) {
				r.log.DebugContext(ctx, "reclaim: job type paused; job left alone", slog.String("job_id", l.ID),
					slog.String("job_type", l.Type))
			}
		case mode == ModeShadow:
			r.wouldReclaim(ctx, p, l, rl)
		default:
			r.hold(p, l, rl)
		}
	}
	return nil
}

// fold returns one job per row, whatever the spelling of its id, in the
// order the rows were first listed: the listings of one row merged, and a
// listing whose id is no id of the table marked unreadable.
func (r *Reclaimer) fold(listed []ActiveJob) []ActiveJob {
	jobs := make([]ActiveJob, 0, len(listed))
	at := make(map[string]int, len(listed))
	for _, l := range listed {
		if id, err := r.cfg.Guard.CanonicalID(l.ID); err == nil {
			l.ID = id
		} else if l.Err == nil {
			l.Err = err
		}
		if i, seen := at[l.ID]; seen {
			jobs[i] = mergeListings(jobs[i], l)
			continue
		}
		at[l.ID] = len(jobs)
		jobs = append(jobs, l)
	}
	return jobs
}

// readRows reads, in one query, the rows of the jobs that need one to be
// decided and came without it.
func (r *Reclaimer) readRows(ctx context.Context, jobs []ActiveJob, ruleOf func(string) rule) error {
	var unread []string
	for _, l := range jobs {
		if _, settled := screen(l, ruleOf(l.Type)); !settled && l.Row == nil {
			unread = append(unread, l.ID)
		}
	}
	if len(unread) == 0 {
		return nil
	}
	rows, err := jobset.New(r.cfg.Guard).Snapshot(ctx, r.cfg.DB, unread)
	if err != nil {
		return fmt.Errorf("read rows: %w", err)
	}
	for i := range jobs {
		if row, found := rows[jobs[i].ID]; found && jobs[i].Row == nil {
			jobs[i].Row = &row
		}
	}
	return nil
}

// tally adds what the write did to the report.
func (r *Reclaimer) tally(ctx context.Context, rep *Report, n *notes, out outcome, typeOf map[string]string) {
	rep.Reclaimed += len(out.failed)
	rep.LostRace += out.moved
	rep.Locked += out.locked
	rep.RuleErrors += out.ruleErrors
	if out.ruleErr != nil && n.ruleErr == nil {
		n.ruleErr = out.ruleErr
	}
	n.sawPanic(out.panicked)
	rep.ReclaimedIDs = slices.Grow(rep.ReclaimedIDs, len(out.failed))
	debug := r.debug(ctx)
	for _, f := range out.failed {
		rep.ReclaimedIDs = append(rep.ReclaimedIDs, f.ID)
		if debug {
			r.log.DebugContext(ctx, "reclaim: job reclaimed", slog.String("job_id", f.ID),
				slog.String("job_type", typeOf[f.ID]), slog.Int64("generation", f.Generation),
				slog.String("parent_id", f.ParentID))
		}
	}
}

// count adds a decision other than reclaim to the report.
func (r *Reclaimer) count(ctx context.Context, rep *Report, n *notes, l ActiveJob, d Decision) {
	*decisionTally[d].count(rep)++
	switch d {
	case DecisionSourceError:
		if n.sourceErr == nil {
			n.sourceErr = fmt.Errorf("job %s: %w", l.ID, l.Err)
		}
		if r.debug(ctx) {
			r.log.DebugContext(ctx, "reclaim: cannot read active job; skipped",
				slog.String("job_id", l.ID), slog.String("job_type", l.Type), slog.Any("error", l.Err))
		}
		return
	case DecisionUnknownType:
		if n.unknownTypes == nil {
			n.unknownTypes = map[string]int{}
		}
		n.unknownTypes[l.Type]++
		if l.Type == "" {
			rep.Untyped++
		}
		return
	case DecisionWithinLimit, DecisionNoStartTime:
		return
	}
	if r.debug(ctx) {
		r.log.DebugContext(ctx, "reclaim: job over its limit left alone", slog.String("job_id", l.ID),
			slog.String("job_type", l.Type), slog.String("decision", d.String()))
	}
}

// debug reports whether the logger writes debug lines. The lines of one
// job are built only when it does: a sweep of ten thousand jobs builds
// nothing for lines no handler writes.
func (r *Reclaimer) debug(ctx context.Context) bool { return r.log.Enabled(ctx, slog.LevelDebug) }
