package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"pgregory.net/rapid"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/settle"
)

// parking is a settle attempt of the parking settler that waits in its
// first handler until released, then fails: an attempt that outlives its
// lease while other operations run.
type parking struct {
	entered atomic.Bool
	in      chan string // the job id the attempt is working on
	release chan struct{}
	done    chan settle.Report
}

// parked is the model's view of a parked attempt.
type parked struct {
	p       *parking
	job     *job
	rec     *record
	attempt int
	// moved is set once anything but the parked attempt changed the
	// record's attempts (a sweep's claim, a Reopen): its claim is gone.
	moved bool
}

// parkSettler is a settler over the world's table whose every handler
// parks the first call of an armed parking, and fails. Its MaxAttempts is
// 1, so every verdict it reaches gives the record up; its lease (an hour)
// only lapses when the model says so.
func (w *world) parkSettler(ctx context.Context) (*settle.Settler, error) {
	park := func(_ context.Context, exec jobguard.Execution, _ json.RawMessage) error {
		w.mu.Lock()
		p := w.parking
		w.mu.Unlock()
		if p != nil && p.entered.CompareAndSwap(false, true) {
			p.in <- exec.JobID
			<-p.release
		}
		return errors.New("the parked attempt failed")
	}
	hs := map[string]settle.Handler{}
	for _, n := range []string{"ok", "flaky", "broken", "panicky"} {
		hs[n] = park
	}
	return settle.New(ctx, settle.Config{
		Guard: w.guard, DB: w.env.Pool, Logger: quiet, Handlers: hs, Increments: w.increments, Ledger: w.ledger,
		Grace: time.Microsecond, UpdateTimeout: time.Hour, MaxAttempts: 1,
		BackoffMin: time.Microsecond, BackoffMax: time.Microsecond, Concurrency: 1, MaxPerSweep: 1,
	})
}

// park starts a sweep of the parking settler, which takes the most
// overdue record and parks in its handler.
func (m *machine) park(rt *rapid.T) {
	if m.parked != nil {
		rt.Skip("an attempt is parked")
	}
	var due []*job
	for _, j := range m.ref.jobs {
		if j.record != nil && j.record.state == recPending && !j.record.leased {
			due = append(due, j)
		}
	}
	if len(due) == 0 {
		rt.Skip("no record to park on")
	}
	for _, j := range due {
		if j.record.attempts > 0 {
			// The parking settler's only attempt is the first: it takes the
			// most overdue record, which must be one it may attempt.
			rt.Skip("a due record was attempted before")
		}
	}
	m.step(rt, "park")
	m.fault()
	p := &parking{in: make(chan string, 1), release: make(chan struct{}), done: make(chan settle.Report, 1)}
	m.w.mu.Lock()
	m.w.parking = p
	m.w.mu.Unlock()
	go func() {
		rep, _ := m.w.parker.Sweep(context.WithoutCancel(m.ctx))
		p.done <- rep
	}()
	select {
	case id := <-p.in:
		var j *job
		for _, d := range due {
			if d.id == id {
				j = d
			}
		}
		if j == nil {
			rt.Fatalf("the parked sweep took job %q, which has no due record in the model", id)
		}
		j.record.attempts++
		j.record.leased = true
		m.parked = &parked{p: p, job: j, rec: j.record, attempt: j.record.attempts}
		m.tally.parked.Add(1)
	case rep := <-p.done:
		rt.Fatalf("the parked sweep returned without parking (report %+v); the model has %d records due", rep, len(due))
	case <-m.ctx.Done():
		rt.Fatalf("the parked sweep neither parked nor returned")
	}
}

// lapse runs the parked attempt's lease out, on the database's side: a
// sweep may claim its record again.
func (m *machine) lapse(rt *rapid.T) {
	if m.parked == nil || !m.parked.rec.leased {
		rt.Skip("no lease to lapse")
	}
	m.step(rt, "lease lapses")
	j := m.parked.job
	if _, err := m.w.env.Pool.Exec(m.ctx, `UPDATE job_settlements SET next_attempt_at = statement_timestamp() - interval '1 second'
		WHERE jobs_table = $1 AND job_id = $2 AND generation = $3`, m.w.guard.TableKey(), j.id, m.parked.rec.gen); err != nil {
		rt.Fatalf("lapse: %v", err)
	}
	m.parked.rec.leased = false
	if rapid.Bool().Draw(rt, "record moves on") {
		m.movesOn(rt)
	}
}

// movesOn is what other processes do with the record while the attempt
// is still parked: sweeps claim it until it is given up, an operator
// reopens it, and a sweep claims it once more, so that its count of
// attempts is back where the parked attempt's was.
func (m *machine) movesOn(rt *rapid.T) {
	r := m.parked.rec
	for n := 0; n < maxTries+1 && r.state == recPending; n++ {
		m.settleSweep(rt)
	}
	if r.state != recGivenUp {
		return
	}
	m.step(rt, "reopen the parked attempt's record")
	err := m.w.settler.Reopen(m.ctx, jobguard.Execution{JobID: m.parked.job.id, Generation: r.gen})
	m.expect(rt, "Reopen", err, okay)
	r.state, r.attempts = recPending, 0
	m.claimed(r)
	m.settleSweep(rt)
}

// release lets the parked attempt's handler return, failed: its verdict
// (give up) stands only if nothing claimed or reopened the record since.
func (m *machine) release(rt *rapid.T) {
	pk := m.parked
	if pk == nil {
		rt.Skip("nothing parked")
	}
	m.step(rt, fmt.Sprintf("release (record moved %v)", pk.moved))
	rep := m.unpark()
	r := pk.rec
	want := settle.Report{Taken: 1}
	switch {
	case pk.moved:
		want.Raced = 1
		m.tally.outlived.Add(1)
	default:
		r.state = recGivenUp
		want.GivenUp = 1
	}
	got := settle.Report{Taken: rep.Taken, Raced: rep.Raced, GivenUp: rep.GivenUp, Settled: rep.Settled}
	if got != want {
		rt.Fatalf("the parked attempt's sweep = %+v, want %+v (report %+v)", got, want, rep)
	}
}

// unpark releases a parked attempt and waits for its sweep.
func (m *machine) unpark() settle.Report {
	pk := m.parked
	if pk == nil {
		return settle.Report{}
	}
	m.parked = nil
	pk.rec.leased = false
	close(pk.p.release)
	rep := <-pk.p.done
	m.w.mu.Lock()
	m.w.parking = nil
	m.w.mu.Unlock()
	return rep
}

// claimed notes that something other than the parked attempt changed r's
// attempts.
func (m *machine) claimed(r *record) {
	if m.parked != nil && m.parked.rec == r {
		m.parked.moved = true
	}
}
