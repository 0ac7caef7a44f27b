package model

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"pgregory.net/rapid"

	"github.com/jobguard/jobguard/heartbeat"
	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/testkit/fixture"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
	"github.com/jobguard/jobguard/settle"
	"github.com/jobguard/jobguard/usage"
)

// tally is what a run did, summed over its sequences.
type tally struct {
	sequences, steps, faults, invariants, failures atomic.Int64
	// What the reclaim sweeps did, for a reader who wonders whether the
	// sequences reach them.
	reclaimed, locked, ruleErrors atomic.Int64
	// The overdue jobs of a paused type and of a type in shadow.
	paused, shadowed atomic.Int64
	// Parked settle attempts, and those released after their record was
	// claimed or reopened by another.
	parked, outlived atomic.Int64
	// Artifacts undone, rechecked and spared; watched executions cancelled
	// by a notice and by the check.
	undone, rechecked, spared, byNotice, byCheck atomic.Int64
	// Jobs rescued from a lapsed lease, and the writes of their old
	// executions drawn after; jobs cancelled; reclaims the brake held back;
	// leases that ended.
	rescued, comebacks, cancels, braked, leasesEnded atomic.Int64
}

// hbBase is the heartbeats' clock at offset zero: their time is the
// model's, never the wall clock.
var hbBase = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

var nextID atomic.Int64

// machine runs one sequence: the model beside the real servers.
type machine struct {
	w     *world
	ctx   context.Context
	ref   *model
	hb    [2]*heartbeat.Heartbeat
	tally *tally
	// seen is what the last check read of each job, for the invariants
	// that compare a step's before and after.
	seen   map[string]row
	lastOp string
	// source is how the next reclaim sweep lists its jobs.
	queue      bool
	staleLists bool
	// parked is the settle attempt waiting in its handler, if any.
	parked *parked
	// leases are the worker processes' leases of the sequence, of every
	// process start; lease is each worker's current one (none on a table
	// without an owner column).
	leases []*procLease
	lease  [2]*procLease
	// preferExec and preferJob, when set, are what the next pickExec and
	// pickJob return: the one a story of several steps (workerDies) is
	// about.
	preferExec *exec
	preferJob  *job
	// braking makes the next sweep one of a braking reclaimer, where
	// Redis and the notices allow it.
	braking bool
}

func newMachine(ctx context.Context, w *world, tl *tally) *machine {
	m := &machine{w: w, ctx: ctx, ref: newModel(w.guard.Fenced()), tally: tl, seen: map[string]row{}}
	m.ref.tally = tl
	for p := range m.hb {
		m.hb[p] = m.newHeartbeat(p)
	}
	return m
}

func (m *machine) newHeartbeat(p int) *heartbeat.Heartbeat {
	return heartbeat.New(m.w.guard, heartbeat.Config{Logger: quiet,
		Now: func() time.Time { return hbBase.Add(m.ref.clocks[p]) }})
}

func (m *machine) actions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"":              m.check,
		"insert":        m.insert,
		"start":         m.start,
		"start again":   m.start,
		"time passes":   m.agePassing,
		"reclaim again": m.reclaim,
		"beat":          m.beat,
		"completeTx":    m.completeTx,
		"finalize":      m.finalize,
		"settle":        m.settleFinalize,
		"fail":          m.fail,
		"retry":         m.retry,
		"reopen":        m.reopen,
		"repair":        m.repair,
		"reclaim":       m.reclaim,
		"settleSweep":   m.settleSweep,
		"age":           m.age,
		"crash":         m.crash,
		"clock":         m.clock,
		"flushRedis":    m.flushRedis,
		"redisDown":     m.redisDown,
		"limit":         m.limit,
		"invalidID":     m.invalidID,
		"invalidFinish": m.invalidFinish,
		"poison":        m.poison,
		"inTx":          m.inTx,
		"twin":          m.twinFinalize,
		"park":          m.park,
		"settleBroken":  m.settleBroken,
		"lapse":         m.lapse,
		"release":       m.release,
		"sweep again":   m.settleSweep,
		"reopen again":  m.reopen,
		"record":        m.record,
		"record again":  m.record,
		"upload":        m.upload,
		"compFinalize":  m.compFinalize,
		"compSweep":     m.compSweep,
		"recheckPasses": m.recheckPasses,
		"watchCheck":    m.watchCheck,
		"pause":         m.pause,
		"pause again":   m.pause,
		"leaseEnds":     m.leaseEnds,
		"leaseEnds too": m.leaseEnds,
		"stall":         m.stall,
		"workerDies":    m.workerDies,
		"cancel":        m.cancel,
		"cancel again":  m.cancel,
	}
}

func (m *machine) step(rt *rapid.T, op string) {
	m.tally.steps.Add(1)
	m.lastOp = op
	rt.Logf("step: %s", op)
	if os.Getenv("MODEL_DEBUG") != "" {
		fmt.Println("step:", op, m.debug())
	}
}

func (m *machine) fault() { m.tally.faults.Add(1) }

// pickJob draws one of the sequence's jobs.
func (m *machine) pickJob(rt *rapid.T) (int, *job) {
	if j := m.preferJob; j != nil {
		m.preferJob = nil
		return slices.Index(m.ref.jobs, j), j
	}
	if len(m.ref.jobs) == 0 {
		rt.Skip("no jobs")
	}
	i := rapid.IntRange(0, len(m.ref.jobs)-1).Draw(rt, "job")
	return i, m.ref.jobs[i]
}

// pickExec draws a live execution, or a forged one of an older
// generation.
func (m *machine) pickExec(rt *rapid.T) (*exec, *job) {
	if e := m.preferExec; e != nil {
		m.preferExec = nil
		if e.rescued {
			m.tally.comebacks.Add(1)
		}
		return e, m.ref.jobs[e.job]
	}
	var live []*exec
	for _, e := range m.ref.execs {
		if !e.dead {
			live = append(live, e)
		}
	}
	if len(live) == 0 || rapid.IntRange(0, 9).Draw(rt, "forge") == 0 {
		i, j := m.pickJob(rt)
		return &exec{job: i, gen: j.gen - 1, proc: rapid.IntRange(0, 1).Draw(rt, "proc")}, j
	}
	e := live[rapid.IntRange(0, len(live)-1).Draw(rt, "exec")]
	if e.rescued {
		m.tally.comebacks.Add(1) // its job was rescued: whatever it writes must be refused
	}
	return e, m.ref.jobs[e.job]
}

// spell draws a spelling of a canonical id that the id column reads as
// the same value.
func (m *machine) spell(rt *rapid.T, id string) string {
	var ok []string
	for _, s := range fixture.Spellings(m.w.jobs.IDType, id) {
		if !s.Newer || serverNewer {
			ok = append(ok, s.ID)
		}
	}
	return ok[rapid.IntRange(0, len(ok)-1).Draw(rt, "spelling")]
}

// serverNewer is set when the server reads PostgreSQL 16's integer forms.
var serverNewer bool

// serverInfinity is set when the server stores an infinite interval
// (PostgreSQL 17 on).
var serverInfinity bool

func (m *machine) newID(rt *rapid.T) string {
	n := nextID.Add(1)
	switch m.w.jobs.Name {
	case fixture.Int4Nullable.Name:
		// Down from the int4 column's largest id, 2147483647.
		return strconv.FormatInt(math.MaxInt32-n, 10)
	case fixture.IntID.Name:
		// Fresh per sequence, and far from 0 so that the sign and zero
		// spellings differ from it.
		return strconv.FormatInt(1_000_000+n, 10)
	case fixture.Prisma.Name:
		return "c" + strings.ReplaceAll(uuid.NewString(), "-", "")[:24]
	case fixture.TextID.Name:
		// Text ids are what they spell: spaces, case and letters beyond
		// ASCII are part of the identity.
		deco := rapid.SampledFrom([]string{"", " Ünïcode", "  spaced  ", "UPPER", "{braces}", "+0042"}).Draw(rt, "decoration")
		return fmt.Sprintf("export/%d%s", n, deco)
	}
	return uuid.NewString()
}

func (m *machine) insert(rt *rapid.T) {
	if len(m.ref.jobs) >= 6 {
		rt.Skip("enough jobs")
	}
	m.step(rt, "insert")
	typ := ""
	if m.w.table.TypeColumn != "" {
		typ = rapid.SampledFrom([]string{"chapter", "video", "orphan"}).Draw(rt, "type")
	}
	st := queued
	start := false
	switch rapid.IntRange(0, 3).Draw(rt, "inserted") {
	case 1:
		st = processing // moved to PROCESSING by another path, no start known
	case 2:
		st, start = processing, true // the column's, or the queue's
	}
	j := &job{id: m.newID(rt), typ: typ, status: st, parentStatus: parentGenerating, marker: -1,
		ledger: map[string]int64{}, twin: map[string]int64{}, calls: map[string]int{}, started: start}
	j.parent = "parent-of-" + j.id
	if m.w.jobs.Name == fixture.Int4Nullable.Name && rapid.Bool().Draw(rt, "no parent") {
		j.parent, j.parentStatus = "", "" // a NULL parent id
	}
	if err := m.w.insert(m.ctx, j.id, j.parent, typ, st, start); err != nil {
		rt.Fatalf("insert: %v", err)
	}
	m.ref.touch(j)
	m.ref.jobs = append(m.ref.jobs, j)
}

func (m *machine) start(rt *rapid.T) {
	i, j := m.pickJob(rt)
	id := m.spell(rt, j.id)
	p := rapid.IntRange(0, 1).Draw(rt, "proc")
	pl := m.lease[p]
	if pl != nil && !rapid.Bool().Draw(rt, "owned") {
		pl = nil
	}
	m.step(rt, fmt.Sprintf("start (owned %v)", pl != nil))
	sg := m.w.starts
	if m.ref.redisDown {
		sg = m.w.startsNo
	}
	owner := ""
	if pl != nil {
		sg, owner = pl.sg, pl.id
		if m.ref.redisDown {
			sg = pl.sgDown
		}
	}
	got, err := sg.Start(m.ctx, m.w.env.Pool, id)
	if pl != nil && pl.ended {
		// The process knows its lease ended: it starts nothing.
		m.expect(rt, "Start under an ended lease", err, ownerLost)
		return
	}
	want := m.ref.start(j, owner, m.reclaimedReason, m.cancelledReason)
	m.expect(rt, "Start", err, want)
	if want == okay {
		if got.JobID != j.id || got.Generation != j.gen {
			rt.Fatalf("Start(%q) = %+v, want job %q generation %d", id, got, j.id, j.gen)
		}
		e := &exec{job: i, gen: j.gen, proc: p}
		m.ref.execs = append(m.ref.execs, e)
		m.watch(e, id)
	}
}

func (m *machine) reclaimedReason(r string) bool { return strings.HasPrefix(r, m.w.reason) }

func (m *machine) cancelledReason(r string) bool {
	return strings.HasPrefix(r, m.w.guard.Shared().CancelledReason)
}

func (m *machine) beat(rt *rapid.T) {
	e, j := m.pickExec(rt)
	id := m.spell(rt, j.id)
	evs := []heartbeat.Evidence{heartbeat.Progress(50), heartbeat.Output(3), heartbeat.Poll("running"),
		heartbeat.Output(0), heartbeat.Poll(""), heartbeat.Progress(101), {}}
	k := rapid.IntRange(0, len(evs)-1).Draw(rt, "evidence")
	m.step(rt, "beat")
	res, err := m.hb[e.proc].Beat(m.ctx, m.w.env.Pool, jobguard.Execution{JobID: id, Generation: e.gen}, evs[k])
	if k >= 3 {
		m.expect(rt, "Beat without evidence", err, noEvidence)
		if res != heartbeat.Failed {
			rt.Fatalf("Beat without evidence = %v, want failed", res)
		}
		return
	}
	written, throttled := m.ref.beat(e, j)
	want, wantErr := heartbeat.Lost, terminal
	switch {
	case throttled:
		want, wantErr = heartbeat.Throttled, okay
	case written:
		want, wantErr = heartbeat.Written, okay
	}
	if wantErr == terminal {
		m.expectLost(rt, "Beat", err, j, e.gen)
	} else {
		m.expect(rt, "Beat", err, wantErr)
	}
	if res != want {
		rt.Fatalf("Beat = %v, want %v", res, want)
	}
}

// products writes what a completion brings: the job's product rows and its
// parent READY, in the completion's transaction.
func (m *machine) products(j *job, gen int64) func(ctx context.Context, tx pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO products (job_id, generation) VALUES ($1, $2), ($1, $2)`, j.id, gen); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE parents SET status = 'READY' WHERE id = $1`, j.parent)
		return err
	}
}

func (m *machine) completeTx(rt *rapid.T) {
	e, j := m.pickExec(rt)
	id := m.spell(rt, j.id)
	fnFails := rapid.IntRange(0, 4).Draw(rt, "fnFails") == 0
	m.step(rt, "completeTx")
	boom := errors.New("the save failed")
	err := m.w.guard.CompleteTx(m.ctx, m.w.env.Pool, jobguard.Execution{JobID: id, Generation: e.gen}, func(tx pgx.Tx) error {
		if err := m.products(j, e.gen)(m.ctx, tx); err != nil {
			return err
		}
		if fnFails {
			return boom
		}
		return nil
	})
	won := active(j.status) && m.ref.owns(j, e.gen)
	switch {
	case won && fnFails:
		if !errors.Is(err, boom) {
			rt.Fatalf("CompleteTx with a failing save = %v, want the save's error", err)
		}
	case won:
		m.ref.complete(e, j)
		m.expect(rt, "CompleteTx", err, okay)
	default:
		m.expectLost(rt, "CompleteTx", err, j, e.gen)
	}
}

var quantities = []int64{0, 7, math.MaxInt64, -1}

func (m *machine) entries(rt *rapid.T, unique bool) []entry {
	n := rapid.IntRange(0, 2).Draw(rt, "entries")
	var out []entry
	for k := 0; k < n; k++ {
		meter := rapid.SampledFrom([]string{"tokens", "seconds"}).Draw(rt, "meter")
		if unique && slices.ContainsFunc(out, func(e entry) bool { return e.meter == meter }) {
			continue
		}
		out = append(out, entry{meter: meter, qty: rapid.SampledFrom(quantities).Draw(rt, "quantity")})
	}
	return out
}

// finalize is jobguard's Finalize, its updates failing or panicking, then
// usage.Accrue of every entry.
func (m *machine) finalize(rt *rapid.T) {
	e, j := m.pickExec(rt)
	id := m.spell(rt, j.id)
	kinds := rapid.SliceOfN(rapid.SampledFrom([]string{"ok", "fail", "panic"}), 0, 3).Draw(rt, "updates")
	ents := m.entries(rt, false)
	m.step(rt, "finalize")
	var ups []jobguard.Update
	for k, kind := range kinds {
		ups = append(ups, jobguard.Update{Name: fmt.Sprintf("%s-%d", kind, k), Run: func(context.Context) error {
			switch kind {
			case "fail":
				return errors.New("metadata store refused")
			case "panic":
				panic("metadata update panicked")
			}
			return nil
		}})
	}
	fin, err := m.w.guard.Finalize(m.ctx, m.w.env.Pool, jobguard.Execution{JobID: id, Generation: e.gen}, jobguard.FinalizeSpec{
		Complete: m.products(j, e.gen), Updates: ups,
	})
	won := m.ref.complete(e, j)
	allOK := !slices.Contains(kinds, "fail") && !slices.Contains(kinds, "panic")
	switch {
	case !won:
		m.expectLost(rt, "Finalize", err, j, e.gen)
		if !fin.Rejected() || fin.Completed() || fin.Confirmed() {
			rt.Fatalf("Finalize of a lost job: rejected %v completed %v confirmed %v", fin.Rejected(), fin.Completed(), fin.Confirmed())
		}
	case allOK:
		m.expect(rt, "Finalize", err, okay)
	default:
		m.expect(rt, "Finalize with failing updates", err, someError)
	}
	if won && (!fin.Completed() || fin.Confirmed() != allOK || fin.Execution().JobID != j.id) {
		rt.Fatalf("Finalize: completed %v confirmed %v (want %v) job %q (want %q)", fin.Completed(), fin.Confirmed(), allOK,
			fin.Execution().JobID, j.id)
	}
	confirmed := won && allOK
	for _, en := range ents {
		var increment func(ctx context.Context, tx pgx.Tx) error // tokens: its counter alone
		if m.w.increments[en.meter] != nil {
			increment = func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO bills (job_id, meter, quantity) VALUES ($1, $2, $3)`,
					fin.Execution().JobID, en.meter, en.qty)
				return err
			}
		}
		acc, err := m.w.ledger.Accrue(m.ctx, m.w.env.Pool, fin, usage.Entry{Account: "acct", Meter: en.meter, Quantity: en.qty}, increment)
		switch {
		case !confirmed:
			m.expect(rt, "Accrue of an unconfirmed finalize", err, notConfirmed)
		case en.qty < 0:
			m.expect(rt, "Accrue of a negative quantity", err, someError)
		default:
			m.expect(rt, "Accrue", err, okay)
			if fresh := j.bill(en); acc.Accrued != fresh {
				rt.Fatalf("Accrue(%s) accrued %v, want %v", en.meter, acc.Accrued, fresh)
			}
		}
	}
}

// settleFinalize is settle's Finalize: 0..n updates through the registered
// handlers (flaky, broken, panicky ones among them), 0..n usage entries.
func (m *machine) settleFinalize(rt *rapid.T) {
	names := rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"ok", "flaky", "broken", "panicky", "unregistered"}), 0, 3,
		func(s string) string { return s }).Draw(rt, "updates")
	m.settleFinalizeOf(rt, names)
}

// settleBroken is settle's Finalize with an update whose store is broken:
// a record that stays pending until repaired, for the sweeps to work on.
func (m *machine) settleBroken(rt *rapid.T) { m.settleFinalizeOf(rt, []string{"broken"}) }

func (m *machine) settleFinalizeOf(rt *rapid.T, names []string) {
	e, j := m.pickExec(rt)
	id := m.spell(rt, j.id)
	ents := m.entries(rt, true)
	m.step(rt, "settle.Finalize")
	var ups []settle.Update
	for _, n := range names {
		ups = append(ups, settle.Update{Name: n, Args: map[string]string{"job": j.id}})
	}
	var use []usage.Entry
	negative := false
	for _, en := range ents {
		use = append(use, usage.Entry{Account: "acct", Meter: en.meter, Quantity: en.qty})
		negative = negative || en.qty < 0
	}
	res, err := m.w.settler.Finalize(m.ctx, m.w.env.Pool, jobguard.Execution{JobID: id, Generation: e.gen}, settle.Spec{
		Complete: m.products(j, e.gen), Updates: ups, Usage: use,
	})
	switch {
	case slices.Contains(names, "unregistered"):
		m.expect(rt, "settle.Finalize naming an unregistered update", err, unregistered)
		return
	case negative:
		m.expect(rt, "settle.Finalize billing a negative quantity", err, someError)
		return
	}
	if !m.ref.complete(e, j) {
		m.expectLost(rt, "settle.Finalize", err, j, e.gen)
		if !res.Finalized.Rejected() {
			rt.Fatalf("settle.Finalize of a lost job is not rejected")
		}
		return
	}
	// A table without generations keys its record at generation 0,
	// whatever the execution carried.
	recGen := e.gen
	if !m.ref.fenced {
		recGen = 0
	}
	j.record = &record{gen: recGen, state: recPending, pending: names, usage: ents}
	settled := j.settleRun()
	want := okay
	if !settled {
		want = pending
	}
	m.expect(rt, "settle.Finalize", err, want)
	if res.Settled != settled {
		rt.Fatalf("settle.Finalize settled %v, want %v", res.Settled, settled)
	}
}

func (m *machine) fail(rt *rapid.T) {
	e, j := m.pickExec(rt)
	id := m.spell(rt, j.id)
	reasons := []string{"", "encoder crashed", m.w.reason + " (by hand)", strings.Repeat("long reason ", 30), "nul \x00 byte", "Ünïcode ✓",
		m.w.guard.Shared().CancelledReason + " (by the worker)"}
	reason := rapid.SampledFrom(reasons).Draw(rt, "reason")
	m.step(rt, "fail")
	err := m.w.guard.Fail(m.ctx, m.w.env.Pool, jobguard.Execution{JobID: id, Generation: e.gen}, reason)
	switch {
	case m.ref.fail(e, j, m.stored(reason)):
		m.expect(rt, "Fail", err, okay)
	default:
		m.expectLost(rt, "Fail", err, j, e.gen)
	}
}

// stored is a reason as the failure reason column holds it: what text
// cannot hold of it is written as it can (U+0000 as the four characters
// \x00), and it is cut to a varchar column's length, so that the job is
// failed whatever it says.
func (m *machine) stored(reason string) string {
	s := strings.ReplaceAll(reason, "\x00", `\x00`)
	if r := []rune(s); len(r) > 200 && m.w.jobs.Name == fixture.IntID.Name {
		s = string(r[:200]) // failure_reason is varchar(200) there
	}
	return s
}

func (m *machine) retry(rt *rapid.T) {
	_, j := m.pickJob(rt)
	id := m.spell(rt, j.id)
	m.step(rt, "retry")
	gen, err := m.w.guard.Retry(m.ctx, m.w.env.Pool, id)
	if !m.ref.retry(j) {
		m.expect(rt, "Retry", err, notRetryable)
		return
	}
	m.expect(rt, "Retry", err, okay)
	if gen != j.gen {
		rt.Fatalf("Retry = generation %d, want %d", gen, j.gen)
	}
}

func (m *machine) reopen(rt *rapid.T) {
	_, j := m.pickJob(rt)
	gen := j.gen
	if j.record != nil {
		gen = j.record.gen
	}
	id := m.spell(rt, j.id)
	m.step(rt, "reopen")
	err := m.w.settler.Reopen(m.ctx, jobguard.Execution{JobID: id, Generation: gen})
	if j.record == nil || j.record.state != recGivenUp || j.record.gen != gen {
		m.expect(rt, "Reopen", err, notGivenUp)
		return
	}
	m.expect(rt, "Reopen", err, okay)
	j.record.state, j.record.attempts = recPending, 0
	m.claimed(j.record)
}

// repair makes the broken store of a job work again: what an operator
// fixes before a Reopen.
func (m *machine) repair(rt *rapid.T) {
	_, j := m.pickJob(rt)
	m.step(rt, "repair")
	j.repaired = true
	m.w.mu.Lock()
	m.w.repaired[j.id] = true
	m.w.mu.Unlock()
}

func (m *machine) settleSweep(rt *rapid.T) {
	m.step(rt, "settle.Sweep")
	rep, err := m.w.settler.Sweep(m.ctx)
	if err != nil {
		rt.Fatalf("settle.Sweep: %v", err)
	}
	before := map[*job]string{}
	for _, j := range m.ref.jobs {
		if j.record != nil && !j.record.leased {
			before[j] = j.record.state
		}
	}
	m.ref.sweepSettle()
	var taken, settledN, given int
	for j, st := range before {
		if st == recPending {
			taken++
			m.claimed(j.record)
			switch j.record.state {
			case recConfirmed:
				settledN++
			case recGivenUp:
				given++
			}
		}
	}
	if rep.Taken != taken || rep.Settled != settledN || rep.GivenUp != given {
		rt.Fatalf("settle.Sweep = taken %d settled %d given up %d, want %d %d %d (report %+v)",
			rep.Taken, rep.Settled, rep.GivenUp, taken, settledN, given, rep)
	}
}

var ages = []time.Duration{20 * time.Minute, 3 * time.Hour, 30 * 24 * time.Hour, 50 * 365 * 24 * time.Hour}

func (m *machine) age(rt *rapid.T) {
	_, j := m.pickJob(rt)
	d := rapid.SampledFrom(ages).Draw(rt, "by")
	if j.updAge+d > 200*365*24*time.Hour || j.startAge+d > 200*365*24*time.Hour {
		rt.Skip("old enough")
	}
	m.step(rt, "age")
	if err := m.w.age(m.ctx, j.id, d); err != nil {
		rt.Fatalf("age: %v", err)
	}
	j.updAge += d
	if j.started {
		j.startAge += d
	}
}

// agePassing moves every job back by the same d: time passing for all.
func (m *machine) agePassing(rt *rapid.T) {
	d := rapid.SampledFrom(ages[:3]).Draw(rt, "by")
	for _, j := range m.ref.jobs {
		if j.updAge+d > 200*365*24*time.Hour || j.startAge+d > 200*365*24*time.Hour {
			rt.Skip("old enough")
		}
	}
	m.step(rt, "time passes")
	for _, j := range m.ref.jobs {
		if err := m.w.age(m.ctx, j.id, d); err != nil {
			rt.Fatalf("age: %v", err)
		}
		j.updAge += d
		if j.started {
			j.startAge += d
		}
	}
}

// stall is time passing for every job, far past the short limits, and a
// sweep of a braking reclaimer: what a stall of many jobs at once looks
// like to the brake.
func (m *machine) stall(rt *rapid.T) {
	d := 3 * time.Hour
	for _, j := range m.ref.jobs {
		if j.updAge+d > 200*365*24*time.Hour || j.startAge+d > 200*365*24*time.Hour {
			rt.Skip("old enough")
		}
	}
	if rapid.Bool().Draw(rt, "limits lowered") {
		// An operator lowered every running job's limit to an hour first.
		for _, j := range m.ref.jobs {
			if j.status == processing && !(m.ref.limits[j.typ].set && m.ref.limits[j.typ].d == time.Hour) {
				m.applyLimit(rt, j.typ, limitValues[2])
			}
		}
	}
	m.step(rt, "stall")
	for _, j := range m.ref.jobs {
		if err := m.w.age(m.ctx, j.id, d); err != nil {
			rt.Fatalf("age: %v", err)
		}
		j.updAge += d
		if j.started {
			j.startAge += d
		}
	}
	m.braking = true
	m.reclaim(rt)
}

// crash drops a worker process's memory: its executions and heartbeat.
func (m *machine) crash(rt *rapid.T) {
	p := rapid.IntRange(0, 1).Draw(rt, "proc")
	m.step(rt, "crash")
	m.fault()
	for _, e := range m.ref.execs {
		if e.proc == p {
			e.dead = true
			if e.watch != nil && !e.watch.gone {
				e.watch.release() // the process, and its watches, are gone
				e.watch.gone = true
			}
		}
	}
	m.ref.slots[p] = map[string]time.Duration{}
	m.hb[p] = m.newHeartbeat(p)
	// The process starts again under a lease of its own; the dead one's
	// stays live on the database's clock until it lapses (leaseEnds).
	if m.lease[p] != nil {
		m.lease[p] = m.newLease(rt, p)
	}
}

// clock moves a process's clock: the heartbeats' of a worker, the
// reclaimer's Now.
func (m *machine) clock(rt *rapid.T) {
	p := rapid.IntRange(0, len(m.ref.clocks)-1).Draw(rt, "proc")
	d := rapid.SampledFrom([]time.Duration{2 * time.Minute, 6 * time.Minute, -6 * time.Minute, 365 * 24 * time.Hour}).Draw(rt, "by")
	m.step(rt, "clock")
	m.fault()
	m.ref.clocks[p] += d
}

func (m *machine) flushRedis(rt *rapid.T) {
	m.step(rt, "flushRedis")
	m.fault()
	if err := m.w.flush(m.ctx); err != nil {
		rt.Fatalf("flush: %v", err)
	}
	for _, j := range m.ref.jobs {
		j.marker = -1
	}
}

func (m *machine) redisDown(rt *rapid.T) {
	m.step(rt, "redisDown")
	if !m.ref.redisDown {
		m.fault()
	}
	m.ref.redisDown = !m.ref.redisDown
}

type limitValue struct {
	name string
	sql  string // the interval stored; "" deletes the row
	lim  limit
}

var limitValues = []limitValue{
	{"1µs", "1 microsecond", limit{set: true, d: time.Microsecond}},
	{"none", "", limit{}},
	{"1h", "1 hour", limit{set: true, d: time.Hour}},
	{"10d", "240 hours", limit{set: true, d: 240 * time.Hour}},
	{"LimitMax", "max", limit{set: true, forever: true}},
	{"1000y", "1000 years", limit{set: true, forever: true}},
	{"infinity", "infinity", limit{set: true, forever: true}},
}

func (m *machine) limit(rt *rapid.T) {
	typ := ""
	if m.w.table.TypeColumn != "" {
		typ = rapid.SampledFrom([]string{"chapter", "video", "orphan"}).Draw(rt, "type")
	}
	m.setLimit(rt, typ, false)
}

// setLimits gives every type a limit drawn at the start of a sequence.
func (m *machine) setLimits(rt *rapid.T) {
	types := []string{""}
	if m.w.table.TypeColumn != "" {
		types = []string{"chapter", "video", "orphan"}
	}
	for _, typ := range types {
		m.setLimit(rt, typ, true)
	}
}

// setLimit sets typ's limit; short ones, those a sequence can reach,
// more often when short is set.
func (m *machine) setLimit(rt *rapid.T, typ string, short bool) {
	values := limitValues
	if short {
		values = append(slices.Clone(limitValues), limitValues[0], limitValues[0], limitValues[2], limitValues[2])
	}
	if !serverInfinity {
		values = slices.DeleteFunc(values, func(v limitValue) bool { return v.sql == "infinity" })
	}
	m.applyLimit(rt, typ, rapid.SampledFrom(values).Draw(rt, "limit"))
}

// applyLimit stores v as typ's limit.
func (m *machine) applyLimit(rt *rapid.T, typ string, v limitValue) {
	m.step(rt, "limit "+v.name)
	var err error
	switch v.sql {
	case "":
		_, err = m.w.env.Pool.Exec(m.ctx, `DELETE FROM job_type_limits WHERE job_type = $1`, typ)
		delete(m.ref.modes, typ) // a row set again starts in mode reclaim
	case "max":
		err = m.w.limits.Set(m.ctx, typ, reclaim.LimitMax)
	default:
		_, err = m.w.env.Pool.Exec(m.ctx, `INSERT INTO job_type_limits (job_type, max_runtime) VALUES ($1, $2::interval)
			ON CONFLICT (job_type) DO UPDATE SET max_runtime = excluded.max_runtime`, typ, v.sql)
	}
	if err != nil {
		rt.Fatalf("limit: %v", err)
	}
	m.ref.limits[typ] = v.lim
}

var invalidIDs = map[fixture.IDType][]string{
	fixture.IDUUID: {"", "not-a-uuid", "{0000}", "\xff", "a\x00b"},
	fixture.IDInt:  {"", "4x2", "99999999999999999999", "- 1", "a\x00b"},
	fixture.IDText: {"", "a\x00b", "\xff"},
}

// int4IDs are ids an int4 column cannot hold: just past its range, in
// every spelling its integers have.
var int4IDs = []string{"2147483648", "-2147483649", "+2147483648", " 2147483648", "0002147483648", "9223372036854775807"}

// badID draws an id the column cannot hold.
func (m *machine) badID(rt *rapid.T) string {
	ids := invalidIDs[m.w.jobs.IDType]
	if m.w.jobs.Name == fixture.Int4Nullable.Name {
		ids = append(slices.Clone(ids), int4IDs...)
	}
	return rapid.SampledFrom(ids).Draw(rt, "id")
}

// invalidID gives Start, Check and Retry an id the column cannot hold.
func (m *machine) invalidID(rt *rapid.T) {
	id := m.badID(rt)
	m.step(rt, "invalidID")
	_, err := m.w.starts.Start(m.ctx, m.w.env.Pool, id)
	m.expect(rt, "Start(invalid id)", err, invalidID)
	m.expect(rt, "Check(invalid id)", m.w.starts.Check(m.ctx, m.w.env.Pool, id), invalidID)
	_, err = m.w.guard.Retry(m.ctx, m.w.env.Pool, id)
	m.expect(rt, "Retry(invalid id)", err, invalidID)
}

// invalidFinish gives the writes of an execution an id the column cannot
// hold.
func (m *machine) invalidFinish(rt *rapid.T) {
	id := m.badID(rt)
	m.step(rt, "invalidFinish")
	e := jobguard.Execution{JobID: id, Generation: 1}
	m.expect(rt, "CompleteTx(invalid id)", m.w.guard.CompleteTx(m.ctx, m.w.env.Pool, e, func(pgx.Tx) error { return nil }), invalidID)
	_, err := m.w.guard.Finalize(m.ctx, m.w.env.Pool, e, jobguard.FinalizeSpec{})
	m.expect(rt, "Finalize(invalid id)", err, invalidID)
	_, err = m.w.settler.Finalize(m.ctx, m.w.env.Pool, e, settle.Spec{})
	m.expect(rt, "settle.Finalize(invalid id)", err, invalidID)
	m.expect(rt, "Fail(invalid id)", m.w.guard.Fail(m.ctx, m.w.env.Pool, e, "x"), invalidID)
	_, err = m.hb[0].Beat(m.ctx, m.w.env.Pool, e, heartbeat.Output(1))
	m.expect(rt, "Beat(invalid id)", err, invalidID)
}

// poison makes the video parent rule fail (or panic) for a job.
func (m *machine) poison(rt *rapid.T) {
	_, j := m.pickJob(rt)
	m.step(rt, "poison")
	m.fault()
	j.poisoned = true
	m.w.mu.Lock()
	m.w.poisoned[j.id] = true
	m.w.mu.Unlock()
}

// inTx gives the calls a caller's transaction: Finalize (jobguard's,
// settle's) refuses it before anything runs; CompleteTx becomes a
// savepoint of it, which commits or rolls back with it.
func (m *machine) inTx(rt *rapid.T) {
	e, j := m.pickExec(rt)
	id := m.spell(rt, j.id)
	commit := rapid.Bool().Draw(rt, "commit")
	m.step(rt, fmt.Sprintf("inTx (commit %v)", commit))
	ex := jobguard.Execution{JobID: id, Generation: e.gen}
	tx, err := m.w.env.Pool.Begin(m.ctx)
	if err != nil {
		rt.Fatalf("begin: %v", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = m.w.guard.Finalize(m.ctx, tx, ex, jobguard.FinalizeSpec{Complete: m.products(j, e.gen)})
	m.expectIs(rt, "Finalize in a transaction", err, jobguard.ErrInTransaction)
	_, err = m.w.settler.Finalize(m.ctx, tx, ex, settle.Spec{Complete: m.products(j, e.gen)})
	m.expectIs(rt, "settle.Finalize in a transaction", err, jobguard.ErrInTransaction)
	err = m.w.guard.CompleteTx(m.ctx, tx, ex, func(tx pgx.Tx) error { return m.products(j, e.gen)(m.ctx, tx) })
	won := active(j.status) && m.ref.owns(j, e.gen)
	if !won {
		m.expectLost(rt, "CompleteTx in a transaction", err, j, e.gen)
		return
	}
	m.expect(rt, "CompleteTx in a transaction", err, okay)
	if !commit {
		return
	}
	if err := tx.Commit(m.ctx); err != nil {
		rt.Fatalf("commit: %v", err)
	}
	m.ref.complete(e, j)
}

// twinFinalize bills, through settle, the job of the twin table that has
// the same id as one of the sequence's jobs: two jobs, two bills.
func (m *machine) twinFinalize(rt *rapid.T) {
	_, j := m.pickJob(rt)
	meter := rapid.SampledFrom([]string{"tokens", "seconds"}).Draw(rt, "meter")
	if len(j.twin) > 0 {
		rt.Skip("twin done")
	}
	m.step(rt, "twin")
	tb := m.w.twin.Table()
	cols := []string{tb.IDColumn, tb.StatusColumn, tb.UpdatedAtColumn}
	vals := "$1, $2, now()"
	args := []any{j.id, tb.Statuses.Queued}
	if tb.TypeColumn != "" {
		cols, vals, args = append(cols, tb.TypeColumn), vals+", $3", append(args, "chapter")
	}
	for i, c := range cols {
		cols[i] = ident.Quote(c)
	}
	idArg, err := m.w.twin.CanonicalID(j.id)
	if err != nil {
		rt.Fatalf("twin id: %v", err)
	}
	if m.w.jobs.IDType == fixture.IDInt {
		n, _ := strconv.ParseInt(idArg, 10, 64)
		args[0] = n
	}
	if _, err := m.w.env.Pool.Exec(m.ctx, fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", tb.QualifiedName(),
		strings.Join(cols, ", "), vals), args...); err != nil {
		rt.Fatalf("twin insert: %v", err)
	}
	ex, err := m.w.twinStarts.Start(m.ctx, m.w.env.Pool, m.spell(rt, j.id))
	m.expect(rt, "twin Start", err, okay)
	res, err := m.w.twinSettler.Finalize(m.ctx, m.w.env.Pool, ex, settle.Spec{
		Usage: []usage.Entry{{Account: "acct", Meter: meter, Quantity: 1}}})
	m.expect(rt, "twin settle.Finalize", err, okay)
	if !res.Settled {
		rt.Fatalf("twin settle.Finalize did not settle")
	}
	j.twin[meter] = 1
}

// expectIs checks that err wraps target.
func (m *machine) expectIs(rt *rapid.T, what string, err, target error) {
	rt.Helper()
	m.tally.invariants.Add(1)
	if !errors.Is(err, target) {
		rt.Fatalf("%s: got %v, want %v", what, err, target)
	}
}

// classify names the class of err.
func classify(err error) refusal {
	switch {
	case err == nil:
		return okay
	case errors.Is(err, jobguard.ErrInvalidJobID):
		return invalidID
	case errors.Is(err, settle.ErrPending):
		return pending
	case errors.Is(err, settle.ErrUnregistered):
		return unregistered
	case errors.Is(err, jobguard.ErrReclaimed):
		return reclaimed
	case errors.Is(err, jobguard.ErrNotRetryable):
		return notRetryable
	case errors.Is(err, jobguard.ErrCancelled):
		return cancelled
	case errors.Is(err, jobguard.ErrNotCancellable):
		return notCancellable
	case errors.Is(err, jobguard.ErrOwnerLost):
		return ownerLost
	case errors.Is(err, jobguard.ErrJobTerminal):
		return terminal
	case errors.Is(err, heartbeat.ErrNoEvidence):
		return noEvidence
	case errors.Is(err, usage.ErrNotConfirmed):
		return notConfirmed
	case errors.Is(err, settle.ErrNotGivenUp):
		return notGivenUp
	}
	return someError
}

// expect checks that err is of the class want: every refusal typed.
func (m *machine) expect(rt *rapid.T, what string, err error, want refusal) {
	rt.Helper()
	m.tally.invariants.Add(1)
	got := classify(err)
	if got != want {
		rt.Fatalf("%s: got %v (%v), want %v", what, got, err, want)
	}
	// A loss to another attempt (ErrRequeued) is terminal for the
	// execution, not for the job: expectLost says when it must be one.
	if (want == terminal || want == reclaimed || want == invalidID || want == cancelled) && !jobguard.IsPermanent(err) &&
		!errors.Is(err, jobguard.ErrRequeued) {
		rt.Fatalf("%s: %v is not permanent", what, err)
	}
	if want == ownerLost && jobguard.IsPermanent(err) {
		rt.Fatalf("%s: %v is permanent; another process may start the job", what, err)
	}
}

// expectLost checks a refused write of job j's execution at generation
// gen: terminal, and a loss to another attempt (ErrRequeued, which is not
// permanent) exactly when the model has the job QUEUED again under a
// newer generation.
func (m *machine) expectLost(rt *rapid.T, what string, err error, j *job, gen int64) {
	rt.Helper()
	m.expect(rt, what, err, terminal)
	want := m.ref.requeued(j, gen)
	if got := errors.Is(err, jobguard.ErrRequeued); got != want {
		rt.Fatalf("%s: %v says requeued %v; the model has the job %v at generation %d, the execution %d",
			what, err, got, j.status, j.gen, gen)
	}
	if got := jobguard.IsPermanent(err); got == want {
		rt.Fatalf("%s: %v: permanent %v, want %v", what, err, got, !want)
	}
}

// check compares the database and Redis with the model, and checks the
// invariants, after every step.
func (m *machine) check(rt *rapid.T) {
	ctx := m.ctx
	w := m.w
	inv := func(ok bool, format string, args ...any) {
		rt.Helper()
		m.tally.invariants.Add(1)
		if !ok {
			rt.Fatalf("invariant: "+format, args...)
		}
	}
	rows, err := w.readRows(ctx)
	if err != nil {
		rt.Fatalf("read jobs: %v", err)
	}
	products, dupProducts, err := w.pairs(ctx, `SELECT job_id, max(generation)::text FROM products GROUP BY job_id`)
	if err != nil {
		rt.Fatalf("read products: %v", err)
	}
	parents, _, err := w.pairs(ctx, `SELECT id, status FROM parents`)
	if err != nil {
		rt.Fatalf("read parents: %v", err)
	}
	ledger, _, err := w.pairs(ctx, `SELECT job_id || '/' || meter, quantity::text FROM usage_ledger WHERE jobs_table = $1`, w.guard.TableKey())
	if err != nil {
		rt.Fatalf("read ledger: %v", err)
	}
	bills, dupBills, err := w.pairs(ctx, `SELECT job_id || '/' || meter, quantity::text FROM bills`)
	if err != nil {
		rt.Fatalf("read bills: %v", err)
	}
	records, _, err := w.pairs(ctx, `SELECT job_id, generation || '/' || state || '/' || attempts FROM job_settlements WHERE jobs_table = $1`, w.guard.TableKey())
	if err != nil {
		rt.Fatalf("read records: %v", err)
	}
	inv(len(dupProducts) == 0 && len(dupBills) == 0, "rows twice: products %v bills %v", dupProducts, dupBills)
	inv(len(rows) == len(m.ref.jobs), "%d job rows, the model has %d", len(rows), len(m.ref.jobs))

	wantLedger := map[string]string{}
	for _, j := range m.ref.jobs {
		r, ok := rows[j.id]
		if !ok {
			rt.Fatalf("job %q has no row (rows %v)", j.id, keys(rows))
		}
		want := row{status: w.statusWord(j.status), gen: j.gen, reason: j.reason, hasReason: j.hasReason, owner: j.owner}
		if r != want {
			rt.Fatalf("job %q after %s: row %+v, model %+v", j.id, m.lastOp, r, want)
		}
		// Invariants beside the model: each compares the step's before and
		// after, or one table with another.
		if prev, ok := m.seen[j.id]; ok {
			inv(r.gen >= prev.gen, "job %q: generation went from %d to %d", j.id, prev.gen, r.gen)
			inv(!(prev.status == w.statusWord(failed) && (r.status == w.statusWord(completed) || r.status == w.statusWord(processing))),
				"job %q went from FAILED to %s by %s", j.id, r.status, m.lastOp)
		}
		m.seen[j.id] = r
		isDone := r.status == w.statusWord(completed)
		_, hasProducts := products[j.id]
		inv(isDone || (!hasProducts && parents[j.parent] != parentReady),
			"job %q is %s with product rows %v, parent %s", j.id, r.status, hasProducts, parents[j.parent])

		wantProduct := ""
		if j.hasProduct {
			wantProduct = strconv.FormatInt(j.product, 10)
		}
		if products[j.id] != wantProduct {
			rt.Fatalf("job %q: product rows of generation %q, model %q", j.id, products[j.id], wantProduct)
		}
		if parents[j.parent] != j.parentStatus {
			rt.Fatalf("job %q: parent %s, model %s", j.id, parents[j.parent], j.parentStatus)
		}
		for meter, q := range j.ledger {
			wantLedger[j.id+"/"+meter] = strconv.FormatInt(q, 10)
		}
		wantRec := ""
		if j.record != nil {
			wantRec = fmt.Sprintf("%d/%s/%d", j.record.gen, j.record.state, j.record.attempts)
		}
		if records[j.id] != wantRec {
			rt.Fatalf("job %q: settle record %q, model %q", j.id, records[j.id], wantRec)
		}
		mk, found, err := w.markers.Read(ctx, j.id)
		if err != nil {
			rt.Fatalf("read marker of %q: %v", j.id, err)
		}
		wantMk := j.marker >= 0
		if found != wantMk || (found && m.ref.fenced && mk.Generation != j.marker) {
			rt.Fatalf("job %q: marker %v %+v, model %v generation %d", j.id, found, mk, wantMk, j.marker)
		}
	}
	twin, _, err := w.pairs(ctx, `SELECT job_id || '/' || meter, quantity::text FROM usage_ledger WHERE jobs_table = $1`, w.twin.TableKey())
	if err != nil {
		rt.Fatalf("read the twin's ledger: %v", err)
	}
	wantTwin := map[string]string{}
	for _, j := range m.ref.jobs {
		for meter, q := range j.twin {
			wantTwin[j.id+"/"+meter] = strconv.FormatInt(q, 10)
		}
	}
	if !mapsEqual(twin, wantTwin) {
		rt.Fatalf("the twin table's ledger %v, model %v", twin, wantTwin)
	}
	for k, v := range twin {
		ledger["twin:"+k] = v // its bills are in the same table
	}
	for k, v := range wantTwin {
		wantLedger["twin:"+k] = v
	}
	m.checkArtifacts(rt)
	m.checkWatched(rt)
	if !mapsEqual(ledger, wantLedger) {
		rt.Fatalf("ledger %v, model %v", ledger, wantLedger)
	}
	// Usage exactly once per confirmed finalize: one increment per ledger
	// row of a meter that has one (seconds, and the twin's), under the
	// job's one identity.
	incremented := map[string]string{}
	for k, v := range ledger {
		if meter := k[strings.LastIndex(k, "/")+1:]; strings.HasPrefix(k, "twin:") || w.increments[meter] != nil {
			incremented[k] = v
		}
	}
	inv(mapsEqual(bills, incremented), "bills %v differ from the ledger's rows with an increment %v", bills, incremented)
	// And each counter's total is its meter's ledger rows of the jobs
	// table, summed: a row never without its total, nor a total twice.
	sums, _, err := w.pairs(ctx, `SELECT account || '/' || meter, sum(quantity)::text FROM usage_ledger
		WHERE jobs_table = $1 GROUP BY account, meter HAVING sum(quantity) <> 0`, w.guard.TableKey())
	if err != nil {
		rt.Fatalf("read the ledger's sums: %v", err)
	}
	totals, _, err := w.pairs(ctx, `SELECT account || '/tokens', tokens::text FROM totals WHERE tokens <> 0
		UNION ALL SELECT account || '/seconds', seconds::text FROM totals WHERE seconds <> 0`)
	if err != nil {
		rt.Fatalf("read the totals: %v", err)
	}
	inv(mapsEqual(totals, sums), "counters' totals %v differ from the ledger's sums %v", totals, sums)
	for k := range ledger {
		if strings.HasPrefix(k, "twin:") {
			continue
		}
		id := k[:strings.LastIndex(k, "/")]
		r := rows[id]
		inv(r.status == w.statusWord(completed), "job %q billed while %s", id, r.status)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func (m *machine) debug() string {
	var b strings.Builder
	for _, j := range m.ref.jobs {
		fmt.Fprintf(&b, "[%s %v g%d st%v sa%v ua%v lim%+v] ", j.typ, j.status, j.gen, j.started, j.startAge, j.updAge, m.ref.limits[j.typ])
	}
	return b.String()
}
