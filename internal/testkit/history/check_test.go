package history_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/testkit/history"
)

var rules = history.Rules{Limit: 400 * time.Millisecond, NoProgress: 250 * time.Millisecond}

// builder writes a hand-made history on a clock of its own: each event is
// one millisecond after the one before unless it says otherwise.
type builder struct {
	events []history.Event
	now    time.Time
	call   int64
}

func newBuilder() *builder { return &builder{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (b *builder) add(e history.Event) *builder {
	b.now = b.now.Add(time.Millisecond)
	e.Seq = int64(len(b.events) + 1)
	if e.Process == "" {
		e.Process = "w1"
	}
	e.At, e.TxAt = b.now, b.now
	b.events = append(b.events, e)
	return b
}

// wait moves the clock on.
func (b *builder) wait(d time.Duration) *builder { b.now = b.now.Add(d); return b }

// op records an invoke and its ok, the way a worker does.
func (b *builder) op(op, job string, gen int64) *builder {
	b.call++
	invGen := gen
	if op == history.OpStart || op == history.OpRetry || op == history.OpCancel {
		invGen = 0
	}
	b.add(history.Event{Call: b.call, Op: op, Kind: history.KindInvoke, JobID: job, Generation: invGen})
	return b.add(history.Event{Call: b.call, Op: op, Kind: history.KindOK, JobID: job, Generation: gen})
}

func (b *builder) beat(job string, gen int64) *builder {
	return b.add(history.Event{Op: history.OpHeartbeat, Kind: history.KindOK, JobID: job, Generation: gen})
}

// reclaim records a reclaim and the report of its sweep.
func (b *builder) reclaim(job string, gen int64) *builder {
	b.add(history.Event{Process: "reclaimer-1", Op: history.OpReclaim, Kind: history.KindOK, JobID: job, Generation: gen})
	return b.add(history.Event{Process: "reclaimer-1", Op: history.OpSweep, Kind: history.KindOK, Counts: map[string]int{"reclaimed": 1}})
}

// rescue records a rescue of job to gen, as the audit trigger writes it in
// the rescue's transaction, and the report of its sweep.
func (b *builder) rescue(job string, gen int64) *builder {
	b.add(history.Event{Process: "reclaimer-1", Op: history.OpRescue, Kind: history.KindOK, JobID: job, Generation: gen, Detail: "w1"})
	return b.add(history.Event{Process: "reclaimer-1", Op: history.OpSweep, Kind: history.KindOK, Counts: map[string]int{"rescued": 1}})
}

func (b *builder) bill(job string, gen int64) *builder {
	return b.add(history.Event{Op: history.OpBill, Kind: history.KindOK, JobID: job, Generation: gen, Detail: "video_ms"})
}

// completed is a job started and completed at generation 1, its product
// rows, its finalize confirmed and billed once.
func completed() (*builder, history.State) {
	b := newBuilder().op(history.OpStart, "j1", 1).beat("j1", 1).op(history.OpComplete, "j1", 1).bill("j1", 1)
	return b, history.State{
		Jobs:        map[string]history.Job{"j1": {Status: "COMPLETED", Generation: 1}},
		Products:    []history.Product{{Table: "chapters", ID: "1", JobID: "j1", Generation: 1}},
		Ready:       []history.Product{{Table: "courses", ID: "c1", JobID: "j1"}},
		Settlements: []history.Settlement{{JobID: "j1", Generation: 1, State: "confirmed"}},
		Ledger:      []history.Billing{{JobID: "j1", Generation: 1, Meter: "video_ms"}},
	}
}

// reclaimed is a job started at 1, hung past its limit and reclaimed.
func reclaimed() (*builder, history.State) {
	b := newBuilder().op(history.OpStart, "j1", 1).wait(time.Second).reclaim("j1", 1)
	return b, only("FAILED", 1)
}

// only is a final state of job j1 alone, status at gen.
func only(status string, gen int64) history.State {
	return history.State{Jobs: map[string]history.Job{"j1": {Status: status, Generation: gen}}}
}

// rulesOf lists the rules of vs, each run of one rule once.
func rulesOf(vs []history.Violation) []history.Rule {
	var out []history.Rule
	for _, v := range vs {
		if len(out) == 0 || out[len(out)-1] != v.Rule {
			out = append(out, v.Rule)
		}
	}
	return out
}

// caught requires that the checker finds rule broken, and only it.
func caught(t *testing.T, events []history.Event, final history.State, rule history.Rule) {
	t.Helper()
	vs, _ := history.Check(events, final, rules)
	require.NotEmpty(t, vs, "the checker found nothing")
	require.Equal(t, []history.Rule{rule}, rulesOf(vs), "violations: %v", vs)
}

func TestCheck_CleanHistoriesHaveNoViolations(t *testing.T) {
	t.Parallel()
	b, final := completed()
	vs, stats := history.Check(b.events, final, rules)
	require.Empty(t, vs)
	require.Equal(t, 6, stats.Events)
	require.Equal(t, 2, stats.Kinds[history.KindInvoke])
	require.Equal(t, 1, stats.Ops[history.OpHeartbeat])

	b, final = reclaimed()
	b.op(history.OpRetry, "j1", 2).op(history.OpStart, "j1", 3).op(history.OpComplete, "j1", 3)
	final.Jobs["j1"] = history.Job{Status: "COMPLETED", Generation: 3}
	vs, _ = history.Check(b.events, final, rules)
	require.Empty(t, vs)

	// Rescued from a dead worker, completed by another; cancelled, then
	// reopened by a retry and completed.
	b = newBuilder().op(history.OpStart, "j1", 1).rescue("j1", 2).op(history.OpStart, "j1", 3).op(history.OpComplete, "j1", 3)
	b.op(history.OpStart, "j2", 1).op(history.OpCancel, "j2", 2).op(history.OpRetry, "j2", 3).op(history.OpStart, "j2", 4).
		op(history.OpComplete, "j2", 4)
	vs, _ = history.Check(b.events, history.State{Jobs: map[string]history.Job{
		"j1": {Status: "COMPLETED", Generation: 3}, "j2": {Status: "COMPLETED", Generation: 4}}}, rules)
	require.Empty(t, vs)
}

func TestCheck_RescueOfAJobNotRunningIsCaught(t *testing.T) {
	t.Parallel()
	b := newBuilder().rescue("j1", 1)
	caught(t, b.events, only("QUEUED", 1), history.RuleRescued)
}

// The worker whose lease lapsed comes back: its heartbeat and its save at
// the rescued generation must have been refused.
func TestCheck_WriteOfARescuedGenerationIsCaught(t *testing.T) {
	t.Parallel()
	b := newBuilder().op(history.OpStart, "j1", 1).rescue("j1", 2).beat("j1", 1)
	caught(t, b.events, only("QUEUED", 2), history.RuleSuperseded)
}

func TestCheck_CancelledJobStartedWithoutRetryIsCaught(t *testing.T) {
	t.Parallel()
	b := newBuilder().op(history.OpStart, "j1", 1).op(history.OpCancel, "j1", 2).op(history.OpStart, "j1", 3)
	caught(t, b.events, only("PROCESSING", 3), history.RuleCancelled)
}

// A cancel that did not bump the generation leaves the running execution
// its job's generation.
func TestCheck_CancelThatDidNotRaiseTheGenerationIsCaught(t *testing.T) {
	t.Parallel()
	b := newBuilder().op(history.OpStart, "j1", 1).op(history.OpCancel, "j1", 1)
	caught(t, b.events, only("FAILED", 1), history.RuleGrow)
}

func TestCheck_ConfirmedFinalizeBilledTwiceIsCaught(t *testing.T) {
	t.Parallel()
	b, final := completed()
	b.add(history.Event{Process: "settler-1", Op: history.OpBill, Kind: history.KindOK, JobID: "j1", Generation: 1, Detail: "video_ms"})
	final.Ledger = append(final.Ledger, final.Ledger[0])
	caught(t, b.events, final, history.RuleBilledOnce)
}

func TestCheck_ConfirmedFinalizeNeverBilledIsCaught(t *testing.T) {
	t.Parallel()
	b := newBuilder().op(history.OpStart, "j1", 1).op(history.OpComplete, "j1", 1)
	caught(t, b.events, history.State{
		Jobs:        map[string]history.Job{"j1": {Status: "COMPLETED", Generation: 1}},
		Settlements: []history.Settlement{{JobID: "j1", Generation: 1, State: "confirmed"}},
	}, history.RuleBilledOnce)
}

func TestCheck_BillOfAGivenUpFinalizeIsCaught(t *testing.T) {
	t.Parallel()
	b, final := completed()
	final.Settlements[0].State = "given_up"
	caught(t, b.events, final, history.RuleBilledOnce)
}

func TestCheck_LedgerRowNobodyBilledIsCaught(t *testing.T) {
	t.Parallel()
	b, final := completed()
	final.Ledger = append(final.Ledger, history.Billing{JobID: "j1", Generation: 1, Meter: "other"})
	caught(t, b.events, final, history.RuleBilledOnce)
}

func TestCheck_WriteFromSupersededGenerationIsCaught(t *testing.T) {
	t.Parallel()
	// The lease ran out; a second delivery started generation 2, and the
	// first one's completion was accepted after it.
	b := newBuilder().op(history.OpStart, "j1", 1).op(history.OpStart, "j1", 2).op(history.OpComplete, "j1", 1)
	caught(t, b.events, only("COMPLETED", 2), history.RuleSuperseded)

	b = newBuilder().op(history.OpStart, "j1", 1).op(history.OpStart, "j1", 2).beat("j1", 1)
	caught(t, b.events, only("PROCESSING", 2), history.RuleSuperseded)
}

func TestCheck_ProductRowOfAJobNotCompletedIsCaught(t *testing.T) {
	t.Parallel()
	b, final := reclaimed()
	final.Products = []history.Product{{Table: "chapters", ID: "1", JobID: "j1", Generation: 1}}
	caught(t, b.events, final, history.RuleProducts)

	b, final = reclaimed()
	final.Ready = []history.Product{{Table: "courses", ID: "c1", JobID: "j1"}}
	caught(t, b.events, final, history.RuleProducts)

	// A row left by the first attempt of a job a later attempt completed.
	b = newBuilder().op(history.OpStart, "j1", 1).wait(time.Second).reclaim("j1", 1).
		op(history.OpRetry, "j1", 2).op(history.OpStart, "j1", 3).op(history.OpComplete, "j1", 3)
	caught(t, b.events, history.State{
		Jobs:     map[string]history.Job{"j1": {Status: "COMPLETED", Generation: 3}},
		Products: []history.Product{{Table: "chapters", ID: "1", JobID: "j1", Generation: 1}},
	}, history.RuleProducts)
}

func TestCheck_ReclaimOfAnAttemptThatShowedProgressIsCaught(t *testing.T) {
	t.Parallel()
	// Over its limit, but it beat 100ms before the reclaim.
	b := newBuilder().op(history.OpStart, "j1", 1).wait(600*time.Millisecond).beat("j1", 1).
		wait(100*time.Millisecond).reclaim("j1", 1)
	caught(t, b.events, only("FAILED", 1), history.RuleProgress)
}

func TestCheck_ReclaimWithinTheLimitIsCaught(t *testing.T) {
	t.Parallel()
	// A retried job reclaimed on a listing of its old attempt: its new
	// attempt is 300ms old.
	b := newBuilder().op(history.OpStart, "j1", 1).op(history.OpFail, "j1", 1).op(history.OpRetry, "j1", 2).
		wait(300*time.Millisecond).reclaim("j1", 2)
	caught(t, b.events, only("FAILED", 2), history.RuleProgress)
}

func TestCheck_UntypedRefusalIsCaught(t *testing.T) {
	t.Parallel()
	b, final := reclaimed()
	b.add(history.Event{Call: 9, Op: history.OpComplete, Kind: history.KindInvoke, JobID: "j1", Generation: 1})
	b.add(history.Event{Call: 9, Op: history.OpComplete, Kind: history.KindRefused, JobID: "j1", Generation: 1, Reason: "unknown"})
	caught(t, b.events, final, history.RuleTyped)
}

func TestCheck_RefusalThatTookEffectIsCaught(t *testing.T) {
	t.Parallel()
	b, final := completed()
	// The completion's call says refused, but its ok is in the history.
	b.add(history.Event{Call: 2, Op: history.OpComplete, Kind: history.KindRefused, JobID: "j1", Generation: 1,
		Reason: history.ReasonTerminal, Detail: "FAILED"})
	caught(t, b.events, final, history.RuleTyped)
}

func TestCheck_FailedJobCompletedWithoutRetryIsCaught(t *testing.T) {
	t.Parallel()
	// A late worker's status-only completion of a reclaimed job.
	b, _ := reclaimed()
	b.op(history.OpComplete, "j1", 1)
	caught(t, b.events, only("COMPLETED", 1), history.RuleRetryOnly)

	// A start that moved a FAILED job back to PROCESSING.
	b, _ = reclaimed()
	b.op(history.OpStart, "j1", 2)
	caught(t, b.events, only("PROCESSING", 2), history.RuleRetryOnly)
}

func TestCheck_GenerationThatDidNotGrowIsCaught(t *testing.T) {
	t.Parallel()
	b, _ := reclaimed()
	b.op(history.OpRetry, "j1", 1)
	caught(t, b.events, only("QUEUED", 1), history.RuleGrow)

	b, _ = reclaimed()
	caught(t, b.events, only("FAILED", 0), history.RuleGrow)
}

func TestCheck_FinalStateTheHistoryDoesNotExplainIsCaught(t *testing.T) {
	t.Parallel()
	b := newBuilder().op(history.OpStart, "j1", 1)
	caught(t, b.events, only("COMPLETED", 1), history.RuleExplained)
}

func TestCheck_SweepReportsThatDisagreeAreCaught(t *testing.T) {
	t.Parallel()
	b, final := reclaimed()
	b.add(history.Event{Process: "reclaimer-1", Op: history.OpSweep, Kind: history.KindOK, Counts: map[string]int{"reclaimed": 2}})
	caught(t, b.events, final, history.RuleExplained)
}

func TestCheck_InvokeWithoutOutcomeFromALiveProcessIsCaught(t *testing.T) {
	t.Parallel()
	b := newBuilder().op(history.OpStart, "j1", 1)
	b.add(history.Event{Call: 7, Op: history.OpComplete, Kind: history.KindInvoke, JobID: "j1", Generation: 1})
	caught(t, b.events, only("PROCESSING", 1), history.RuleExplained)
}

// A worker killed between its completion's invoke and its outcome may have
// completed the job or not: both final states pass, and neither the
// missing outcome nor the unexplained completion is held against the run.
func TestCheck_CrashedInvokeIsIndeterminate(t *testing.T) {
	t.Parallel()
	for _, status := range []string{"COMPLETED", "PROCESSING"} {
		b := newBuilder().op(history.OpStart, "j1", 1)
		b.add(history.Event{Call: 7, Op: history.OpComplete, Kind: history.KindInvoke, JobID: "j1", Generation: 1})
		b.add(history.Event{Process: "w1", Op: "kill", Kind: history.KindCrashed})
		final := only(status, 1)
		vs, stats := history.Check(b.events, final, rules)
		require.Empty(t, vs, status)
		require.Equal(t, 1, stats.Indeterminate)
	}

	// A statement sent just before the kill may be appended after the
	// crash: its invoke is indeterminate too.
	b := newBuilder().op(history.OpStart, "j1", 1)
	b.add(history.Event{Process: "w1", Op: "kill", Kind: history.KindCrashed})
	b.add(history.Event{Call: 7, Op: history.OpComplete, Kind: history.KindInvoke, JobID: "j1", Generation: 1})
	vs, _ := history.Check(b.events, only("PROCESSING", 1), rules)
	require.Empty(t, vs)

	// A failed outcome (the commit's answer was lost) is indeterminate too.
	b = newBuilder().op(history.OpStart, "j1", 1)
	b.add(history.Event{Call: 7, Op: history.OpComplete, Kind: history.KindInvoke, JobID: "j1", Generation: 1})
	b.add(history.Event{Call: 7, Op: history.OpComplete, Kind: history.KindFailed, JobID: "j1", Generation: 1, Detail: "conn closed"})
	vs, _ = history.Check(b.events, only("COMPLETED", 1), rules)
	require.Empty(t, vs)

	// A crashed start may have made a new generation.
	b = newBuilder().op(history.OpStart, "j1", 1)
	b.add(history.Event{Call: 7, Op: history.OpStart, Kind: history.KindInvoke, JobID: "j1"})
	b.add(history.Event{Process: "w1", Op: "kill", Kind: history.KindCrashed})
	vs, _ = history.Check(b.events, only("PROCESSING", 2), rules)
	require.Empty(t, vs)

	// What a crashed completion cannot explain is still caught: a FAILED
	// job.
	b = newBuilder().op(history.OpStart, "j1", 1)
	b.add(history.Event{Call: 7, Op: history.OpComplete, Kind: history.KindInvoke, JobID: "j1", Generation: 1})
	b.add(history.Event{Process: "w1", Op: "kill", Kind: history.KindCrashed})
	caught(t, b.events, only("FAILED", 1), history.RuleExplained)
}
