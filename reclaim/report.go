package reclaim

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jobguard/jobguard/internal/safe"
)

// Report counts the decisions of one sweep. The listings of one row are
// folded into one job, and every job listed lands in exactly one of
// NoStartTime, SourceErrors, UnknownType, WithinLimit, Stale, NotActive,
// Progressing, Reclaimed, LostRace, Locked, RuleErrors, WouldReclaim,
// Paused and Braked;
// NoStartTime also counts the jobs a source never lists for want of a
// start (an UnstartedCounter).
type Report struct {
	// Scanned is the number of jobs the source listed (a TableSource lists
	// only the jobs over their limit).
	Scanned int
	// NoStartTime counts jobs whose current attempt has no known start,
	// neither in the queue nor in the row: skipped, never reclaimed. With a
	// TableSource, which never lists them, it is the number of PROCESSING
	// rows whose start column is NULL, counted at every sweep and not in
	// Scanned.
	NoStartTime int
	// SourceErrors counts jobs the source could not read, or whose id is
	// not an id of the table: skipped.
	SourceErrors int
	// UnknownType counts jobs whose type has no limit: skipped.
	UnknownType int
	// Untyped counts the jobs of UnknownType whose type is empty: every
	// job of a mapping without a TypeColumn, or a row whose type column
	// holds "". No per-type limit matches them; the sweep's summary says
	// so in words.
	Untyped int
	// WithinLimit counts jobs whose current attempt has not yet run past its
	// limit.
	WithinLimit int
	// Stale counts listings of an attempt the row no longer runs: the row
	// was retried and waits QUEUED, or was restarted since (a newer
	// generation, or a later start in its own start column). Never acted
	// on.
	Stale int
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
	// Locked counts jobs chosen for reclaim whose row another transaction
	// held at the write: a held row is being written, which is progress, so
	// the sweep skipped it rather than wait. The next sweep looks again.
	Locked int
	// RuleErrors counts jobs chosen for reclaim whose parent rule failed:
	// the job and its parent were left as they were, for the next sweep; the
	// other jobs were reclaimed.
	RuleErrors int
	// MarkerErrors counts reclaimed jobs whose Redis marker could not be
	// written. The database reason still refuses them at start. Markers in
	// Postgres are written by the reclaim's statement: one that cannot be
	// written fails its reclaim instead, so this stays zero.
	MarkerErrors int
	// NoticeErrors counts reclaimed jobs whose notice could not be published.
	// Their workers' watchers still find the reclaim at their next check.
	NoticeErrors int
	// ReclaimedIDs lists the reclaimed jobs' ids, as the id column prints
	// them.
	ReclaimedIDs []string
	// WouldReclaim counts the jobs a shadow sweep (Config.Shadow) or a Plan
	// would have reclaimed: over the limit and no progress. Nothing was
	// written for them. A live sweep leaves it at zero.
	WouldReclaim int
	// WouldReclaimIDs lists their ids, as the id column prints them.
	WouldReclaimIDs []string
	// Rescued counts jobs sent back to QUEUED under a new generation
	// because their owner's lease was not live (Config.Workers): their
	// worker process died, was stopped or was cut off. They are read from
	// the jobs table apart from the source's listings, and not in Scanned;
	// a rescue that finds the row changed or held counts in LostRace or
	// Locked.
	Rescued int
	// RescuedIDs lists the rescued jobs' ids, as the id column prints
	// them.
	RescuedIDs []string
	// WouldRescue counts the jobs a shadow sweep or a Plan would have
	// rescued. A live sweep leaves it at zero.
	WouldRescue int
	// Paused counts the jobs the sweep would have reclaimed whose type an
	// operator paused (ModeOff): left alone, never reclaimed automatically.
	// The jobs of a type in ModeShadow are counted in WouldReclaim.
	Paused int
	// Braked counts the jobs the sweep decided to reclaim and held back
	// because its Brake engaged: left as they are, for a later sweep.
	Braked int
	// BrakeReason says why the sweep was braked: which cap its reclaims
	// went over, or how far the database's clock moved. "" when it was
	// not.
	BrakeReason string
}

// notes are what a sweep tells an operator beyond its counts: the first
// error of each kind, and the types without a limit.
type notes struct {
	noLimits     bool
	unknownTypes map[string]int
	sourceErr    error
	ruleErr      error
	markerErr    error
	noticeErr    error
	unstartedErr error // the count of the jobs never listed for want of a start
	// panicked is the first of those errors that is a panic of the
	// caller's code (a parent rule, a notifier), whose stack the summary
	// logs.
	panicked error
}

// sawPanic keeps err when it is the pass's first panic.
func (n *notes) sawPanic(err error) {
	if n.panicked == nil && safe.AsPanic(err) != nil {
		n.panicked = err
	}
}

// needsAttention reports whether an operator should look: a source or rule
// that fails, types or jobs that are never reclaimed, markers or notices
// lost.
func (n *notes) needsAttention(rep Report) bool {
	return n.noLimits || len(n.unknownTypes) > 0 || rep.NoStartTime > 0 || n.sourceErr != nil || n.ruleErr != nil ||
		n.markerErr != nil || n.noticeErr != nil || n.unstartedErr != nil || n.panicked != nil
}

// summarize logs the one line of a sweep: every counter, how long it took,
// and, at warn level, whatever needs an operator, with the value and the
// stack of the first panic of the caller's code.
func (r *Reclaimer) summarize(ctx context.Context, p *pass, err error, took time.Duration) {
	rep, n := p.rep, &p.notes
	attrs := append(countAttrs(rep, p.dry), slog.Duration("took", took))
	level := slog.LevelInfo
	if n.needsAttention(rep) || err != nil {
		level = slog.LevelWarn
	}
	if rep.Braked > 0 {
		// A sweep that would have reclaimed far more than usual is an
		// incident: what stalled so many jobs at once?
		level = slog.LevelError
		attrs = append(attrs, slog.String("brake", rep.BrakeReason))
	}
	if rep.NoStartTime > 0 {
		attrs = append(attrs, slog.String("no_start_time_note", fmt.Sprintf("%d active jobs have no start time: "+
			"never reclaimed; start jobs through StartGuard.Start, or map the start column", rep.NoStartTime)))
	}
	if n.noLimits {
		attrs = append(attrs, slog.String("limits", "none: no job can be reclaimed"))
	}
	if rep.Untyped > 0 {
		attrs = append(attrs, slog.String("no_type_note", untypedNote(rep.Untyped, r.cfg.Guard.Table().TypeColumn != "")))
	}
	// The empty type is named by the note above, never as an empty word in
	// the list.
	if named := slices.DeleteFunc(slices.Sorted(maps.Keys(n.unknownTypes)), func(t string) bool { return t == "" }); len(named) > 0 {
		attrs = append(attrs, slog.Any("types_without_limit", named))
	}
	for _, e := range []struct {
		key string
		err error
	}{
		{"source_error", n.sourceErr}, {"rule_error", n.ruleErr},
		{"marker_error", n.markerErr}, {"notice_error", n.noticeErr},
		{"no_start_time_error", n.unstartedErr}, {"error", err},
	} {
		if e.err != nil {
			attrs = append(attrs, slog.String(e.key, e.err.Error()))
		}
	}
	// The stack of the first panic: a rule's or a notifier's, else the
	// source's or the limits', which is the sweep's error.
	attrs = append(attrs, safe.Attrs(n.panicked, err)...)
	r.log.LogAttrs(ctx, level, "reclaim: sweep", attrs...)
}

// countAttrs are the counters of the sweep's line: a shadow sweep's first,
// then scanned and every other. A rare counter is logged when it counts
// something, and a live sweep logs a shadow type's would-reclaims too.
func countAttrs(rep Report, dry bool) []slog.Attr {
	var attrs []slog.Attr
	counts := rep.Counts()
	if dry {
		attrs = append(attrs, slog.Bool("shadow", true))
		for _, c := range counts {
			if c.Shadow {
				attrs = append(attrs, slog.Int(c.Key, c.N))
			}
		}
	}
	attrs = append(attrs, slog.Int("scanned", rep.Scanned))
	for _, c := range counts {
		if (!c.Shadow || !dry && c.N > 0) && (!c.Rare || c.N > 0) {
			attrs = append(attrs, slog.Int(c.Key, c.N))
		}
	}
	return attrs
}

// untypedNote says in words why n jobs without a type have no limit, and
// what to do: typed says whether the mapping has a TypeColumn.
func untypedNote(n int, typed bool) string {
	if !typed {
		return fmt.Sprintf("%d jobs have no type: the mapping has no Table.TypeColumn, so every job's type is \"\" "+
			"and no per-type limit matches; set Table.TypeColumn to the column that names each job's type, "+
			"or give the type \"\" a limit", n)
	}
	return fmt.Sprintf("%d jobs have the empty type \"\" in their type column, which no per-type limit matches: "+
		"give them a type, or give the type \"\" a limit", n)
}
