package model

import "time"

// The reference model: plain Go, sharing no code with the guards. It says
// what the database and Redis must hold after each operation, and which
// refusal each call must return.

type status int

const (
	queued status = iota
	processing
	completed
	failed
)

func (s status) String() string {
	return [...]string{"QUEUED", "PROCESSING", "COMPLETED", "FAILED"}[s]
}

// Parent statuses.
const (
	parentGenerating = "GENERATING"
	parentReady      = "READY"
	parentFailed     = "FAILED"
)

// Record states.
const (
	recPending   = "pending"
	recConfirmed = "confirmed"
	recGivenUp   = "given_up"
)

// refusal is the class of error a call must return.
type refusal int

const (
	okay           refusal = iota
	terminal               // errors.Is ErrJobTerminal, IsPermanent
	reclaimed              // errors.Is ErrReclaimed, IsPermanent
	invalidID              // errors.Is ErrInvalidJobID, IsPermanent
	notRetryable           // errors.Is ErrNotRetryable
	cancelled              // errors.Is ErrCancelled, IsPermanent
	notCancellable         // errors.Is ErrNotCancellable
	ownerLost              // errors.Is ErrOwnerLost, not IsPermanent
	noEvidence             // errors.Is heartbeat.ErrNoEvidence
	pending                // errors.Is settle.ErrPending
	notConfirmed           // errors.Is usage.ErrNotConfirmed
	notGivenUp             // errors.Is settle.ErrNotGivenUp
	unregistered           // errors.Is settle.ErrUnregistered
	someError              // any error, nothing changed
)

func (r refusal) String() string {
	return [...]string{"nil", "ErrJobTerminal", "ErrReclaimed", "ErrInvalidJobID", "ErrNotRetryable",
		"ErrCancelled", "ErrNotCancellable", "ErrOwnerLost", "ErrNoEvidence", "ErrPending", "ErrNotConfirmed", "ErrNotGivenUp", "ErrUnregistered", "an error"}[r]
}

type entry struct {
	meter string
	qty   int64
}

type record struct {
	gen      int64
	state    string
	pending  []string // update names not yet succeeded
	attempts int
	usage    []entry
	leased   bool // a parked attempt's lease holds it: no sweep takes it
}

type job struct {
	id, parent, typ string // parent is empty for a NULL parent id
	status          status
	gen             int64
	reason          string
	hasReason       bool
	started         bool          // the row (or the queue) knows the attempt's start
	startAge        time.Duration // how far the start was moved back
	updAge          time.Duration // how far updated_at was moved back
	touched         int64         // when updated_at was last written, in the model's writes
	owner           string        // the lease id in the owner column; "" for none
	product         int64         // generation of the product rows
	hasProduct      bool
	parentStatus    string
	marker          int64 // generation of the reclaim marker; -1: none
	ledger          map[string]int64
	record          *record
	poisoned        bool             // its parent rule fails
	twin            map[string]int64 // meters billed for the twin table's job of the same id
	repaired        bool             // the store the "broken" update writes to works again
	calls           map[string]int
}

type exec struct {
	job   int
	gen   int64
	proc  int
	dead  bool
	watch *watched // its context under the watcher, if watched
	// rescued: its job was rescued from it, its lease having lapsed.
	rescued bool
}

// limit is a type's limit in the model: none, or a duration (a very
// long one, LimitMax or beyond, is forever).
type limit struct {
	set     bool
	d       time.Duration
	forever bool
}

type model struct {
	fenced    bool
	jobs      []*job
	execs     []*exec
	limits    map[string]limit
	modes     map[string]string // a type's mode other than "reclaim" (pause_test.go)
	clocks    [4]time.Duration  // process clock offsets: two workers, the reclaimer, the compensate sweeper
	slots     [2]map[string]time.Duration
	redisDown bool
	arts      []*artifact     // in the order recorded: the table's id order
	writes    int64           // the writes of updated_at so far: the order of touched
	things    map[string]bool // the files that exist, by ref
	tally     *tally
}

const (
	interval   = 5 * time.Minute  // heartbeat interval
	noProgress = 15 * time.Minute // reclaimer no-progress threshold
	maxTries   = 3                // settle MaxAttempts
)

func newModel(fenced bool) *model {
	m := &model{fenced: fenced, limits: map[string]limit{}, modes: map[string]string{}, things: map[string]bool{}}
	for i := range m.slots {
		m.slots[i] = map[string]time.Duration{}
	}
	return m
}

// touch is a write of j's updated_at: now, on the database's clock, after
// every write before it.
func (m *model) touch(j *job) {
	m.writes++
	j.updAge, j.touched = 0, m.writes
}

func (m *model) owns(j *job, gen int64) bool { return !m.fenced || j.gen == gen }

// requeued reports whether an execution at generation gen lost job j to
// another attempt: the job is QUEUED again under a newer generation.
func (m *model) requeued(j *job, gen int64) bool {
	return m.fenced && j.status == queued && j.gen > gen
}

func active(s status) bool { return s == queued || s == processing }

func (m *model) markerApplies(j *job) bool {
	return j.marker >= 0 && (!m.fenced || j.marker >= j.gen)
}

// start is StartGuard.Start, under the lease owner ("" for none). The
// refusal says a reclaim first, then a cancel, then a marker: except on a
// table without generations, where a marker refuses before the row is
// read.
func (m *model) start(j *job, owner string, reclaimedReason, cancelledReason func(string) bool) refusal {
	byReason := j.hasReason && reclaimedReason(j.reason)
	byCancel := j.hasReason && cancelledReason(j.reason)
	byMarker := !m.redisDown && m.markerApplies(j)
	switch {
	case active(j.status) && !byReason && !byCancel && !byMarker:
		j.status = processing
		if m.fenced {
			j.gen++
		}
		j.started, j.startAge, j.owner = true, 0, owner
		m.touch(j)
		return okay
	case byReason, byMarker && !m.fenced:
		return reclaimed
	case byCancel:
		return cancelled
	case byMarker:
		return reclaimed
	}
	return terminal
}

// beat is Heartbeat.Beat with valid evidence.
func (m *model) beat(e *exec, j *job) (written bool, throttled bool) {
	now := m.clocks[e.proc]
	if last, ok := m.slots[e.proc][j.id]; ok && now-last < interval {
		return false, true
	}
	m.slots[e.proc][j.id] = now
	if j.status == processing && m.owns(j, e.gen) {
		m.touch(j)
		return true, false
	}
	return false, false
}

// complete is the conditional completion with the product rows and the
// parent READY written in its transaction.
func (m *model) complete(e *exec, j *job) bool {
	if !active(j.status) || !m.owns(j, e.gen) {
		return false
	}
	j.status = completed
	m.touch(j)
	j.product, j.hasProduct = e.gen, true
	if j.parent != "" {
		j.parentStatus = parentReady
	}
	return true
}

func (m *model) fail(e *exec, j *job, reason string) bool {
	if !active(j.status) || !m.owns(j, e.gen) {
		return false
	}
	j.status, j.reason, j.hasReason = failed, reason, true
	m.touch(j)
	return true
}

func (m *model) retry(j *job) bool {
	if j.status != failed {
		return false
	}
	j.status, j.hasReason, j.reason, j.started, j.startAge, j.owner = queued, false, "", false, 0, ""
	m.touch(j)
	if m.fenced {
		j.gen++
	}
	return true
}

// overdue says whether the reclaimer must reclaim j (before held rows).
func (m *model) overdue(j *job) bool {
	if j.status != processing || !j.started {
		return false
	}
	l := m.limits[j.typ]
	if !l.set || l.forever {
		return false
	}
	return j.startAge >= l.d && j.updAge >= noProgress
}

// rescue is the rescue of a running job whose owner's lease is not live:
// back to QUEUED under a new generation, no owner, no start, the rescued
// reason; no marker, no parent.
func (m *model) rescue(j *job, reason string) {
	j.status, j.reason, j.hasReason, j.owner = queued, reason, true, ""
	j.gen++
	j.started, j.startAge = false, 0
	m.touch(j)
}

// cancel is an operator's cancel of an active job: FAILED with the
// cancel's reason, under a new generation; the owner stays.
func (m *model) cancel(j *job, reason string) {
	j.status, j.reason, j.hasReason = failed, reason, true
	if m.fenced {
		j.gen++
	}
	m.touch(j)
}

func (m *model) reclaim(j *job, reason string, withParent bool) {
	j.status, j.reason, j.hasReason = failed, reason, true
	m.touch(j)
	if withParent && j.parentStatus == parentGenerating {
		j.parentStatus = parentFailed
	}
	if !m.redisDown && j.gen > j.marker {
		j.marker = j.gen
	}
}

// runUpdate is one call of a settle handler by name: whether it succeeds.
func (j *job) runUpdate(name string) bool {
	j.calls[name]++
	switch name {
	case "flaky", "panicky":
		return j.calls[name] > 1
	case "broken":
		return j.repaired
	}
	return true
}

// settleRun runs a record's pending updates and bills when all succeeded.
func (j *job) settleRun() bool {
	var left []string
	for _, u := range j.record.pending {
		if !j.runUpdate(u) {
			left = append(left, u)
		}
	}
	j.record.pending = left
	if len(left) > 0 {
		return false
	}
	j.record.state = recConfirmed
	for _, e := range j.record.usage {
		j.bill(e)
	}
	return true
}

func (j *job) bill(e entry) bool {
	if _, ok := j.ledger[e.meter]; ok {
		return false
	}
	j.ledger[e.meter] = e.qty
	return true
}

// sweepSettle is one settle sweep over every pending record.
func (m *model) sweepSettle() {
	for _, j := range m.jobs {
		r := j.record
		if r == nil || r.state != recPending || r.leased {
			continue
		}
		r.attempts++
		if !j.settleRun() && r.attempts >= maxTries {
			r.state = recGivenUp
		}
	}
}
