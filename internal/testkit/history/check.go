package history

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Rule names a property the checker validates.
type Rule string

// The rules. Each violation names one.
const (
	// RuleBilledOnce: every confirmed (job, generation) is billed exactly
	// once per meter, nothing else is billed, and the ledger holds what the
	// history billed.
	RuleBilledOnce Rule = "billed once"
	// RuleSuperseded: no write is accepted from a generation other than the
	// job's current one.
	RuleSuperseded Rule = "no superseded write"
	// RuleProducts: no product row or READY parent for a job that is not
	// COMPLETED at the row's generation.
	RuleProducts Rule = "products only for completed jobs"
	// RuleProgress: no reclaim of an attempt that showed progress within
	// the no-progress window, or ran no longer than its limit, on the
	// database's clock.
	RuleProgress Rule = "reclaim only the stuck"
	// RuleTyped: every refusal gives a typed reason and changed nothing.
	RuleTyped Rule = "refusals typed"
	// RuleRetryOnly: FAILED leaves only through Retry; COMPLETED never
	// changes.
	RuleRetryOnly Rule = "FAILED leaves only through Retry"
	// RuleRescued: a rescue takes only a running job, and its attempt
	// ends there: the job goes back to QUEUED under a new generation.
	RuleRescued Rule = "rescue only a running job"
	// RuleCancelled: a cancelled job runs, completes and bills no more,
	// unless a Retry reopens it.
	RuleCancelled Rule = "a cancel holds until a Retry"
	// RuleGrow: generations only grow.
	RuleGrow Rule = "generations grow"
	// RuleExplained: the final state is what the history did, or what its
	// indeterminate operations may have done; every invoke has an outcome
	// unless its process crashed; the sweeps' reports agree with the
	// history.
	RuleExplained Rule = "history explains the state"
)

// Rules holds the limits the checked run ran with.
type Rules struct {
	// Limit is the runtime past which an attempt may be reclaimed.
	Limit time.Duration
	// NoProgress is the window within which progress keeps an attempt from
	// being reclaimed.
	NoProgress time.Duration
}

// Violation is one rule broken, with what shows it.
type Violation struct {
	Rule Rule
	// What says what was found.
	What string
	// Count is how many cases show it; Examples holds the first five.
	Count    int
	Examples []string
}

// String prints the violation with its examples, one per line.
func (v Violation) String() string {
	return fmt.Sprintf("%s: %s (%d)\n  %s", v.Rule, v.What, v.Count, strings.Join(v.Examples, "\n  "))
}

// Stats are the figures of a checked history.
type Stats struct {
	Events int
	// Kinds counts the events by kind, Ops the ok events by operation.
	Kinds map[Kind]int
	Ops   map[string]int
	// Indeterminate counts the operations that may or may not have taken
	// effect: invokes left without an outcome by a crash, or failed.
	Indeterminate int
}

// String prints the figures on one line.
func (s Stats) String() string {
	var ops []string
	for op, n := range s.Ops {
		ops = append(ops, fmt.Sprintf("%s %d", op, n))
	}
	sort.Strings(ops)
	return fmt.Sprintf("%d events (invoke %d, ok %d, refused %d, failed %d, crashed %d; indeterminate %d); ok: %s",
		s.Events, s.Kinds[KindInvoke], s.Kinds[KindOK], s.Kinds[KindRefused], s.Kinds[KindFailed], s.Kinds[KindCrashed],
		s.Indeterminate, strings.Join(ops, ", "))
}

// Check validates the history against rules and the final state. Every
// job starts QUEUED at generation 0. An ok event is taken as done, a
// refusal as not done; an invoke whose process crashed before its outcome,
// or whose outcome is failed, may or may not have been done: it can
// explain the final state, and it is never held against the run.
func Check(events []Event, final State, rules Rules) ([]Violation, Stats) {
	c := &checker{rules: rules, found: map[string]*Violation{}, jobs: map[string]*job{}}
	events = append([]Event(nil), events...)
	sort.SliceStable(events, func(i, j int) bool { return events[i].Seq < events[j].Seq })
	stats := c.calls(events)
	for _, e := range events {
		stats.Events++
		stats.Kinds[e.Kind]++
		if e.Kind == KindOK {
			stats.Ops[e.Op]++
		}
		c.apply(e)
	}
	c.reports(events)
	c.final(final)
	c.billing(events, final)
	var out []Violation
	for _, k := range c.order {
		out = append(out, *c.found[k])
	}
	return out, stats
}

// job is what the history says of one job so far.
type job struct {
	status string
	gen    int64
	// started is when the current attempt began (its start or retry), and
	// progress when it showed progress, on the database's clock.
	started  time.Time
	progress []time.Time
	// maybe are the indeterminate operations of the job.
	maybe     []Event
	completed map[int64]bool
	// cancelled is set by an operator's cancel, cleared by a retry.
	cancelled bool
}

type checker struct {
	rules Rules
	jobs  map[string]*job
	found map[string]*Violation
	order []string
}

func (c *checker) job(id string) *job {
	j := c.jobs[id]
	if j == nil {
		j = &job{status: "QUEUED", completed: map[int64]bool{}}
		c.jobs[id] = j
	}
	return j
}

func (c *checker) flag(r Rule, what, example string) {
	key := string(r) + "\x00" + what
	v := c.found[key]
	if v == nil {
		v = &Violation{Rule: r, What: what}
		c.found[key] = v
		c.order = append(c.order, key)
	}
	v.Count++
	if len(v.Examples) < 5 {
		v.Examples = append(v.Examples, example)
	}
}

func describe(e Event) string {
	s := fmt.Sprintf("#%d %s %s %s job %s gen %d at %s", e.Seq, e.Process, e.Op, e.Kind, e.JobID, e.Generation,
		e.At.UTC().Format("15:04:05.000000"))
	if e.Reason != "" {
		s += " reason " + e.Reason
	}
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	return s
}

// callKey names one call: its process incarnation and its number there.
type callKey struct {
	process string
	call    int64
}

// callLog is the history's calls: each invoke, in order, with its
// outcomes, and the processes that crashed.
type callLog struct {
	invokes  map[callKey]Event
	order    []callKey
	outcomes map[callKey][]Event
	// A process name is one incarnation: once it crashed, every invoke of
	// it may be cut short, even one the database appended after the crash
	// (a statement sent just before the kill runs after it).
	crashed map[string]bool
}

func collectCalls(events []Event) callLog {
	l := callLog{invokes: map[callKey]Event{}, outcomes: map[callKey][]Event{}, crashed: map[string]bool{}}
	for _, e := range events {
		k := callKey{e.Process, e.Call}
		switch {
		case e.Kind == KindCrashed:
			l.crashed[e.Process] = true
		case e.Call == 0:
		case e.Kind == KindInvoke:
			l.invokes[k] = e
			l.order = append(l.order, k)
		default:
			l.outcomes[k] = append(l.outcomes[k], e)
		}
	}
	return l
}

// calls pairs each invoke with its outcome, flags the pairs that cannot
// be, and records the indeterminate operations with their jobs.
func (c *checker) calls(events []Event) Stats {
	l := collectCalls(events)
	stats := Stats{Kinds: map[Kind]int{}, Ops: map[string]int{}}
	for _, k := range l.order {
		inv, outs := l.invokes[k], l.outcomes[k]
		switch {
		case len(outs) == 0 && l.crashed[k.process]:
			c.indeterminate(&stats, inv)
		case len(outs) == 0:
			c.flag(RuleExplained, "an invoke without an outcome from a process that did not crash", describe(inv))
		case c.onlyFailed(inv, outs):
			// Only failed: the commit may have been lost, or only its
			// answer.
			c.indeterminate(&stats, inv)
		}
	}
	for k, outs := range l.outcomes {
		if _, ok := l.invokes[k]; !ok {
			c.flag(RuleExplained, "an outcome without its invoke", describe(outs[0]))
		}
	}
	return stats
}

// indeterminate records an operation that may or may not have taken
// effect with its job.
func (c *checker) indeterminate(stats *Stats, inv Event) {
	stats.Indeterminate++
	c.job(inv.JobID).maybe = append(c.job(inv.JobID).maybe, inv)
}

// onlyFailed flags the outcomes of inv that cannot be together, and
// reports whether every outcome is a failure.
func (c *checker) onlyFailed(inv Event, outs []Event) bool {
	kinds := map[Kind]int{}
	for _, o := range outs {
		kinds[o.Kind]++
	}
	switch {
	case kinds[KindRefused] > 0 && kinds[KindOK] > 0:
		c.flag(RuleTyped, "an operation refused that also took effect", describe(inv))
	case kinds[KindOK] > 1 || kinds[KindRefused] > 1:
		c.flag(RuleExplained, "an operation with more than one outcome", describe(inv))
	case kinds[KindOK] == 0 && kinds[KindRefused] == 0:
		return true
	}
	return false
}

// apply walks one event through its job's lifecycle.
func (c *checker) apply(e Event) {
	if e.Kind == KindRefused && !typedReasons[e.Reason] {
		c.flag(RuleTyped, "a refusal without a typed reason", describe(e))
	}
	if e.Kind != KindOK || e.JobID == "" || e.Op == OpBill || e.Op == OpSweep {
		return
	}
	c.applyOK(e, c.job(e.JobID))
}

// applyOK walks an operation that took effect through j's lifecycle.
func (c *checker) applyOK(e Event, j *job) {
	switch e.Op {
	case OpStart:
		c.terminal(e, j)
		c.newAttempt(e, j)
		j.status = "PROCESSING"
	case OpRetry:
		if j.status != "FAILED" {
			c.flag(RuleRetryOnly, "a retry of a job that was not FAILED", fmt.Sprintf("%s; was %s", describe(e), j.status))
		}
		c.newAttempt(e, j)
		j.status, j.cancelled = "QUEUED", false
	case OpRescue:
		c.rescue(e, j)
	case OpCancel:
		c.terminal(e, j)
		c.newAttempt(e, j)
		j.status, j.cancelled = "FAILED", true
	case OpHeartbeat:
		c.terminal(e, j)
		c.current(e, j)
		if e.Generation == j.gen {
			j.progress = append(j.progress, e.TxAt)
		}
	case OpComplete:
		c.terminal(e, j)
		c.current(e, j)
		j.status = "COMPLETED"
		j.completed[e.Generation] = true
	case OpFail:
		c.terminal(e, j)
		c.current(e, j)
		j.status = "FAILED"
	case OpReclaim:
		c.terminal(e, j)
		c.current(e, j)
		c.stuck(e, j)
		j.status = "FAILED"
	default:
		c.flag(RuleExplained, "an operation the checker does not know", describe(e))
	}
}

// rescue walks a rescue: only of a running job, to a new attempt, QUEUED.
func (c *checker) rescue(e Event, j *job) {
	if j.status != "PROCESSING" {
		c.flag(RuleRescued, "a rescue of a job that was not running", fmt.Sprintf("%s; was %s", describe(e), j.status))
	}
	c.newAttempt(e, j)
	j.status = "QUEUED"
}

// terminal flags e if j had already ended.
func (c *checker) terminal(e Event, j *job) {
	switch {
	case j.cancelled:
		c.flag(RuleCancelled, "a cancelled job changed other than through Retry", describe(e))
	case j.status == "FAILED":
		c.flag(RuleRetryOnly, "a FAILED job changed other than through Retry", describe(e))
	case j.status == "COMPLETED":
		c.flag(RuleRetryOnly, "a COMPLETED job changed", describe(e))
	}
}

// current flags e if it came from a generation other than j's current one.
func (c *checker) current(e Event, j *job) {
	switch {
	case e.Generation < j.gen:
		c.flag(RuleSuperseded, "a "+e.Op+" accepted from a superseded generation", fmt.Sprintf("%s; current generation %d", describe(e), j.gen))
	case e.Generation > j.gen:
		c.flag(RuleSuperseded, "a "+e.Op+" accepted from a generation never started", fmt.Sprintf("%s; current generation %d", describe(e), j.gen))
	}
}

// newAttempt begins j's attempt at e's generation, which must be higher.
func (c *checker) newAttempt(e Event, j *job) {
	if e.Generation <= j.gen {
		c.flag(RuleGrow, "a "+e.Op+" that did not raise the generation", fmt.Sprintf("%s; was %d", describe(e), j.gen))
	}
	j.gen, j.started, j.progress = e.Generation, e.TxAt, []time.Time{e.TxAt}
}

// stuck checks that a reclaim judged an attempt that was over its limit
// and showed no progress within the window, on the database's clock: the
// reclaim's event is written after its write (At), the progress's before
// its own (TxAt), so the comparison can only favour the reclaim.
func (c *checker) stuck(e Event, j *job) {
	if e.Generation != j.gen || j.started.IsZero() {
		return // flagged as superseded
	}
	if ran := e.At.Sub(j.started); ran <= c.rules.Limit {
		c.flag(RuleProgress, "a reclaim of an attempt that had not run past its limit",
			fmt.Sprintf("%s; attempt began %v before, limit %v", describe(e), ran, c.rules.Limit))
	}
	for _, p := range j.progress {
		if since := e.At.Sub(p); since >= 0 && since < c.rules.NoProgress {
			c.flag(RuleProgress, "a reclaim of an attempt that showed progress within the no-progress window",
				fmt.Sprintf("%s; progress %v before, window %v", describe(e), since, c.rules.NoProgress))
			return
		}
	}
}

// reports compares what the sweeps reported with what the history holds:
// the reclaims, and the rescues.
func (c *checker) reports(events []Event) {
	for _, r := range []struct{ op, count string }{{OpReclaim, "reclaimed"}, {OpRescue, "rescued"}} {
		var reported, recorded, failedSweeps int
		for _, e := range events {
			switch {
			case e.Op == OpSweep && e.Kind == KindFailed:
				failedSweeps++
			case e.Op == OpSweep && e.Kind == KindOK:
				reported += e.Counts[r.count]
			case e.Op == r.op && e.Kind == KindOK:
				recorded++
			}
		}
		// A sweep that failed may have done some of its work and reported
		// none of it.
		if reported > recorded || (failedSweeps == 0 && reported != recorded) {
			c.flag(RuleExplained, "the reclaim sweeps' reports differ from the "+r.op+"s in the history",
				fmt.Sprintf("reported %d, recorded %d, failed sweeps %d", reported, recorded, failedSweeps))
		}
	}
}

// target is the status an operation's ok leaves.
var target = map[string]string{OpStart: "PROCESSING", OpRetry: "QUEUED", OpComplete: "COMPLETED", OpFail: "FAILED",
	OpReclaim: "FAILED", OpCancel: "FAILED"}

// final compares each job's final row with its walked history.
func (c *checker) final(s State) {
	for id, j := range c.jobs {
		if id == "" {
			continue
		}
		row, ok := s.Jobs[id]
		if !ok {
			c.flag(RuleExplained, "a job of the history that is not in the jobs table", "job "+id)
			continue
		}
		if row.Generation < j.gen {
			c.flag(RuleGrow, "a job whose generation went down", fmt.Sprintf("job %s at %d, history reached %d", id, row.Generation, j.gen))
			continue
		}
		if row.Status == j.status && row.Generation == j.gen {
			continue
		}
		if !c.explained(j, row) {
			c.flag(RuleExplained, "a final row the history does not explain",
				fmt.Sprintf("job %s is %s at %d, history says %s at %d", id, row.Status, row.Generation, j.status, j.gen))
		}
	}
}

// explained says whether an indeterminate operation of j may have left
// row: one that leaves its status, at its generation (a start or a retry
// whose generation is unknown may have made any higher one).
func (c *checker) explained(j *job, row Job) bool {
	for _, m := range j.maybe {
		if target[m.Op] != row.Status {
			continue
		}
		switch m.Op {
		case OpStart, OpRetry, OpCancel:
			if row.Generation > j.gen && (m.Generation == 0 || m.Generation == row.Generation) {
				return true
			}
		default:
			if row.Generation == j.gen && m.Generation == row.Generation {
				return true
			}
		}
	}
	return false
}

// billKey is one bill: an attempt of a job, on a meter.
type billKey struct {
	job   string
	gen   int64
	meter string
}

// billing checks the bills against the finalize records and the ledger,
// and the product rows against the jobs.
func (c *checker) billing(events []Event, s State) {
	bills := map[billKey][]Event{}
	billed := map[[2]string]bool{}
	for _, e := range events {
		if e.Op == OpBill && e.Kind == KindOK {
			k := billKey{e.JobID, e.Generation, e.Detail}
			bills[k] = append(bills[k], e)
			billed[[2]string{e.JobID, fmt.Sprint(e.Generation)}] = true
		}
	}
	confirmed := c.confirmedBilled(s, billed)
	c.billsConfirmed(bills, confirmed)
	c.ledger(bills, s)
	c.products(s)
}

// confirmedBilled returns the confirmed finalizes, flagging each one the
// history never billed.
func (c *checker) confirmedBilled(s State, billed map[[2]string]bool) map[[2]string]bool {
	confirmed := map[[2]string]bool{}
	for _, st := range s.Settlements {
		k := [2]string{st.JobID, fmt.Sprint(st.Generation)}
		if st.State == "confirmed" {
			confirmed[k] = true
			if !billed[k] {
				c.flag(RuleBilledOnce, "a confirmed finalize the history never billed", fmt.Sprintf("job %s gen %d", st.JobID, st.Generation))
			}
		}
	}
	return confirmed
}

// billsConfirmed flags a bill made twice, or for an attempt that was not
// confirmed or never completed.
func (c *checker) billsConfirmed(bills map[billKey][]Event, confirmed map[[2]string]bool) {
	for k, es := range bills {
		if len(es) > 1 {
			var ex []string
			for _, e := range es {
				ex = append(ex, describe(e))
			}
			c.flag(RuleBilledOnce, "a finalize billed more than once", strings.Join(ex, "; "))
		}
		if !confirmed[[2]string{k.job, fmt.Sprint(k.gen)}] {
			c.flag(RuleBilledOnce, "a bill without a confirmed finalize of its attempt", describe(es[0]))
		}
		if j := c.jobs[k.job]; j == nil || !j.completed[k.gen] {
			c.flag(RuleBilledOnce, "a bill for an attempt the history never completed", describe(es[0]))
		}
	}
}

// ledger compares the ledger's rows with the bills, both ways.
func (c *checker) ledger(bills map[billKey][]Event, s State) {
	ledger := map[billKey]int{}
	for _, l := range s.Ledger {
		k := billKey{l.JobID, l.Generation, l.Meter}
		ledger[k]++
		if len(bills[k]) == 0 {
			c.flag(RuleBilledOnce, "a ledger row the history never billed", fmt.Sprintf("job %s gen %d meter %s", l.JobID, l.Generation, l.Meter))
		}
	}
	for k, es := range bills {
		if ledger[k] != 1 {
			c.flag(RuleBilledOnce, "a bill the ledger does not hold exactly once", fmt.Sprintf("%s; ledger rows %d", describe(es[0]), ledger[k]))
		}
	}
}

// products flags a product row or READY parent of a job that is not
// COMPLETED at the row's generation.
func (c *checker) products(s State) {
	for _, p := range append(append([]Product(nil), s.Products...), s.Ready...) {
		row, ok := s.Jobs[p.JobID]
		switch {
		case !ok || row.Status != "COMPLETED":
			c.flag(RuleProducts, "a "+p.Table+" row of a job that is not COMPLETED",
				fmt.Sprintf("%s %s of job %s (%s)", p.Table, p.ID, p.JobID, row.Status))
		case p.Generation != 0 && p.Generation != row.Generation:
			c.flag(RuleProducts, "a "+p.Table+" row of an attempt that did not complete the job",
				fmt.Sprintf("%s %s of job %s gen %d; job COMPLETED at %d", p.Table, p.ID, p.JobID, p.Generation, row.Generation))
		}
	}
}
