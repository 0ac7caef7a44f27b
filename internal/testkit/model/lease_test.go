package model

import (
	"context"
	"time"

	"pgregory.net/rapid"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/lease"
)

// procLease is a worker process start's lease, and the start guards that
// record it as the owner of what they start.
type procLease struct {
	l    *lease.Lease
	id   string
	proc int
	// sg starts with Redis reachable, sgDown with Redis unreachable.
	sg, sgDown *jobguard.StartGuard
	// live: live on the database's clock; ended: the process knows its
	// lease ended (Err is set), and starts nothing more.
	live, ended bool
}

// leaseTTL is the leases' TTL: no sequence lasts it, so a lease lapses
// only when the model says so, and its renewer never runs.
const leaseTTL = time.Hour

// newLease starts a lease for worker process p: a process start.
func (m *machine) newLease(rt *rapid.T, p int) *procLease {
	l, err := lease.New(m.w.env.Pool, lease.Config{TTL: leaseTTL, Logger: quiet})
	if err != nil {
		rt.Fatalf("lease: %v", err)
	}
	if err := l.Start(m.ctx); err != nil {
		rt.Fatalf("lease start: %v", err)
	}
	pl := &procLease{l: l, id: l.ID(), proc: p, live: true}
	m.leases = append(m.leases, pl)
	if pl.sg, err = jobguard.NewStartGuard(m.w.guard, m.w.env.Redis, jobguard.StartGuardConfig{Logger: quiet, Owner: l}); err != nil {
		rt.Fatalf("start guard under a lease: %v", err)
	}
	if pl.sgDown, err = jobguard.NewStartGuard(m.w.guard, m.w.down, jobguard.StartGuardConfig{Logger: quiet, Owner: l}); err != nil {
		rt.Fatalf("start guard under a lease: %v", err)
	}
	return pl
}

// startLeases gives each worker process a lease, on a table with an owner
// column.
func (m *machine) startLeases(rt *rapid.T) {
	if m.w.table.OwnerColumn == "" {
		return
	}
	for p := range m.lease {
		m.lease[p] = m.newLease(rt, p)
	}
}

// stopLeases stops every lease of the sequence: their renewers end.
func (m *machine) stopLeases() {
	for _, pl := range m.leases {
		_ = pl.l.Stop(context.WithoutCancel(m.ctx))
	}
}

// leaseLive reports whether the lease id is live on the database's clock,
// as the model has it.
func (m *machine) leaseLive(id string) bool {
	for _, pl := range m.leases {
		if pl.id == id {
			return pl.live
		}
	}
	return false
}

// leaseEnds ends a lease that is live on the database's clock: it
// expires there (the process was stopped, or cut off, for longer than its
// TTL: it does not know yet, and may still start jobs under it, which are
// orphans from the start), or the process releases it (a clean Stop: it
// knows, and starts nothing more). A crashed process's lease is among
// them: until it ends, its jobs are a live worker's.
func (m *machine) leaseEnds(rt *rapid.T) {
	var live []*procLease
	for _, pl := range m.leases {
		if pl.live {
			live = append(live, pl)
		}
	}
	if len(live) == 0 {
		rt.Skip("no live lease")
	}
	// The leases that own a running job first, whose end a sweep can show.
	var owning []*procLease
	for _, pl := range live {
		for _, j := range m.ref.jobs {
			if j.status == processing && j.owner == pl.id {
				owning = append(owning, pl)
				break
			}
		}
	}
	if len(owning) > 0 && rapid.IntRange(0, 3).Draw(rt, "owning") > 0 {
		live = owning
	}
	pl := live[rapid.IntRange(0, len(live)-1).Draw(rt, "lease")]
	sweep := rapid.Bool().Draw(rt, "sweep after")
	m.end(rt, pl)
	if sweep {
		m.reclaim(rt)
	}
}

// end ends pl: it expires on the database's clock, or is released.
func (m *machine) end(rt *rapid.T, pl *procLease) {
	if rapid.Bool().Draw(rt, "released") {
		m.step(rt, "lease released")
		if err := pl.l.Stop(m.ctx); err != nil {
			rt.Fatalf("lease stop: %v", err)
		}
		pl.ended = true
	} else {
		m.step(rt, "lease expires")
		if _, err := m.w.env.Pool.Exec(m.ctx, `UPDATE `+lease.WorkersTableDefault+
			` SET expires_at = now() - interval '1 second' WHERE id = $1`, pl.id); err != nil {
			rt.Fatalf("lease expires: %v", err)
		}
	}
	m.fault()
	pl.live = false
	m.tally.leasesEnded.Add(1)
}

// workerDies is the story of a dead worker, each step checked like any
// other: a running job's lease ends, a sweep rescues the job (unless its
// row is held), the old execution comes back and writes (a heartbeat, a
// save, a finalize, compensate's finalize: each must be refused), and the
// job is started again.
func (m *machine) workerDies(rt *rapid.T) {
	var owned []*exec
	for _, e := range m.ref.execs {
		j := m.ref.jobs[e.job]
		if !e.dead && j.status == processing && j.gen == e.gen && j.owner != "" && m.leaseLive(j.owner) {
			owned = append(owned, e)
		}
	}
	if len(owned) == 0 {
		rt.Skip("no running job under a live lease")
	}
	e := owned[rapid.IntRange(0, len(owned)-1).Draw(rt, "execution")]
	j := m.ref.jobs[e.job]
	for _, pl := range m.leases {
		if pl.id == j.owner {
			m.end(rt, pl)
		}
	}
	m.reclaim(rt)
	comebacks := []func(*rapid.T){m.beat, m.completeTx, m.finalize, m.settleFinalize, m.fail}
	if m.w.arts[0] != nil {
		comebacks = append(comebacks, m.compFinalize)
	}
	m.preferExec = e
	comebacks[rapid.IntRange(0, len(comebacks)-1).Draw(rt, "comeback")](rt)
	m.preferExec = nil
	m.check(rt)
	m.preferJob = j
	m.start(rt)
	m.preferJob = nil
}

// rescue is the model's rescue of j, which was started under a lease
// that is no longer live: the executions of the generation it took away
// learn it only from their refused writes.
func (m *machine) rescue(j *job) {
	old := j.gen
	m.ref.rescue(j, m.w.guard.Shared().RescuedReason)
	for _, e := range m.ref.execs {
		if m.ref.jobs[e.job] == j && e.gen == old {
			e.rescued = true
		}
	}
}
