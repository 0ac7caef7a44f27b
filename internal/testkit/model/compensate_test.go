package model

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"pgregory.net/rapid"

	"github.com/jobguard/jobguard/compensate"
	"github.com/jobguard/jobguard/jobguard"
)

// recheckAfter is the artifacts' RecheckAfter: far from the steps'
// milliseconds, and from the clock offsets (6 minutes, a year).
const recheckAfter = time.Hour

// Artifact states, as the artifacts table names them.
const (
	artPending  = "pending"
	artKept     = "kept"
	artRejected = "rejected"
	artDone     = "done"
)

// Rechecks of an artifact in the model.
const (
	recheckNone = iota
	recheckScheduled
	recheckDue // RecheckAfter has passed, by the database's clock
)

// artifact is a recorded thing in the model: a file an execution creates,
// named by ref, in the things table.
type artifact struct {
	job     *job
	gen     int64
	ref     string
	state   string
	recheck int
}

// artifactsOf builds the world's artifacts over its guard, one per
// process: the two workers' (Record, Finalize) and the sweeper's
// (Compensate), each on its own clock. A table without a generation
// column has none: New refuses it.
func (w *world) artifactsOf(ctx context.Context) error {
	if w.table.GenerationColumn == "" {
		return nil
	}
	undo := func(ctx context.Context, tx pgx.Tx, a compensate.Artifact) error {
		_, err := tx.Exec(ctx, `DELETE FROM things WHERE ref = $1`, a.Ref)
		return err
	}
	for i, p := range []int{0, 1, sweeperClock} {
		a, err := compensate.New(ctx, compensate.Config{Guard: w.guard, DB: w.env.Pool, Logger: quiet,
			Compensators: map[string]compensate.Func{"file": undo}, RecheckAfter: recheckAfter,
			Now: func() time.Time { return time.Now().Add(w.cur.ref.clocks[p]) }})
		if err != nil {
			return err
		}
		w.arts[i] = a
	}
	return nil
}

// sweeperClock is the index of the compensate sweeper's clock.
const sweeperClock = 3

func (m *machine) needArtifacts(rt *rapid.T) {
	if m.w.arts[0] == nil {
		rt.Skip("no artifacts without a generation column")
	}
}

// record is an execution's Record of a file it is about to create: at a
// path of its own (the generation in it), or at the job's path, which
// every execution of the job shares.
func (m *machine) record(rt *rapid.T) {
	m.needArtifacts(rt)
	e, j := m.pickExec(rt)
	ref := fmt.Sprintf("%s/out", j.id)
	if rapid.Bool().Draw(rt, "own path") {
		ref = fmt.Sprintf("%s/g%d", j.id, e.gen)
	}
	id := m.spell(rt, j.id)
	m.step(rt, "record "+ref)
	err := m.w.arts[e.proc].Record(m.ctx, m.w.env.Pool, jobguard.Execution{JobID: id, Generation: e.gen}, "file", ref)
	var a *artifact
	for _, x := range m.ref.arts {
		if x.job == j && x.gen == e.gen && x.ref == ref {
			a = x
		}
	}
	switch {
	case a == nil:
		m.ref.arts = append(m.ref.arts, &artifact{job: j, gen: e.gen, ref: ref, state: artPending})
		m.expect(rt, "Record", err, okay)
	case a.state == artPending || a.state == artKept:
		m.expect(rt, "Record again", err, okay)
	default:
		a.state, a.recheck = artRejected, recheckNone
		m.expectIs(rt, "Record of a compensated artifact", err, compensate.ErrCompensated)
		m.expect(rt, "Record of a compensated artifact", err, terminal)
	}
}

// upload creates a recorded thing: an execution's write landing, maybe
// long after it lost its job.
func (m *machine) upload(rt *rapid.T) {
	m.needArtifacts(rt)
	if len(m.ref.arts) == 0 {
		rt.Skip("nothing recorded")
	}
	a := m.ref.arts[rapid.IntRange(0, len(m.ref.arts)-1).Draw(rt, "artifact")]
	m.step(rt, "upload "+a.ref)
	if _, err := m.w.env.Pool.Exec(m.ctx, `INSERT INTO things (ref) VALUES ($1) ON CONFLICT DO NOTHING`, a.ref); err != nil {
		rt.Fatalf("upload: %v", err)
	}
	m.ref.things[a.ref] = true
}

// compFinalize is compensate's Finalize: a completion that keeps the
// execution's artifacts, or, rejected, compensates them at once.
func (m *machine) compFinalize(rt *rapid.T) {
	m.needArtifacts(rt)
	e, j := m.pickExec(rt)
	id := m.spell(rt, j.id)
	m.step(rt, "compensate.Finalize")
	_, err := m.w.arts[e.proc].Finalize(m.ctx, m.w.env.Pool, jobguard.Execution{JobID: id, Generation: e.gen},
		jobguard.FinalizeSpec{Complete: m.products(j, e.gen)})
	if m.ref.complete(e, j) {
		m.expect(rt, "compensate.Finalize", err, okay)
		for _, a := range m.ref.arts {
			if a.job == j && a.gen == e.gen && a.state == artPending {
				a.state = artKept
			}
		}
		return
	}
	m.expect(rt, "compensate.Finalize of a lost job", err, terminal)
	if j.status == completed && j.gen == e.gen {
		return // this execution completed it: nothing is owed
	}
	for _, a := range m.ref.arts {
		if a.job == j && a.gen == e.gen && (a.state == artPending || a.state == artDone) {
			a.state, a.recheck = artRejected, recheckNone
		}
	}
	for _, a := range m.ref.arts {
		if a.job == j && a.gen == e.gen && a.state == artRejected {
			m.ref.compensate(a, false)
		}
	}
}

// compSweep is one sweep of compensate, by the sweeper on its own clock.
func (m *machine) compSweep(rt *rapid.T) {
	m.needArtifacts(rt)
	m.step(rt, "compensate.Compensate")
	rep, err := m.w.arts[2].Compensate(m.ctx)
	if err != nil {
		rt.Fatalf("compensate: %v", err)
	}
	var want compensate.Report
	for _, a := range m.ref.arts {
		if a.state == artPending && a.job.gen == a.gen && a.job.status == completed {
			a.state = artKept
			want.Kept++
		}
	}
	for _, a := range m.ref.arts {
		if a.state == artPending && (a.job.gen != a.gen || a.job.status == failed) {
			a.state = artRejected
			want.Rejected++
		}
	}
	for _, a := range m.ref.arts {
		if a.state == artRejected {
			if m.ref.compensate(a, false) {
				want.Compensated++
			} else {
				want.Spared++
			}
		}
	}
	for _, a := range m.ref.arts {
		if a.state == artDone && a.recheck == recheckDue {
			if m.ref.compensate(a, true) {
				want.Rechecked++
			} else {
				want.Spared++
			}
		}
	}
	if rep != want {
		rt.Fatalf("compensate sweep = %+v, model %+v", rep, want)
	}
}

// compensate undoes a: its thing is removed, unless another execution's
// artifact of the same ref may still be kept or was (spared). It reports
// whether the thing was undone.
func (m *model) compensate(a *artifact, recheck bool) bool {
	for _, b := range m.arts {
		if b != a && b.ref == a.ref && (b.state == artPending || b.state == artKept) {
			a.state, a.recheck = artDone, recheckNone
			m.tally.spared.Add(1)
			return false
		}
	}
	if recheck {
		m.tally.rechecked.Add(1)
	} else {
		m.tally.undone.Add(1)
	}
	delete(m.things, a.ref)
	a.state, a.recheck = artDone, recheckScheduled
	if recheck {
		a.recheck = recheckNone
	}
	return true
}

// recheckPasses moves every scheduled recheck past due, on the database's
// side: RecheckAfter passing.
func (m *machine) recheckPasses(rt *rapid.T) {
	m.needArtifacts(rt)
	m.step(rt, "RecheckAfter passes")
	if _, err := m.w.env.Pool.Exec(m.ctx, `UPDATE job_artifacts SET recheck_at = recheck_at - $2::interval
		WHERE jobs_table = $1 AND recheck_at IS NOT NULL`, m.w.guard.TableKey(), fmt.Sprintf("%d seconds", int(2*recheckAfter.Seconds()))); err != nil {
		rt.Fatalf("recheck passes: %v", err)
	}
	for _, a := range m.ref.arts {
		if a.recheck == recheckScheduled {
			a.recheck = recheckDue
		}
	}
}

// checkArtifacts compares the artifacts and the things with the model.
func (m *machine) checkArtifacts(rt *rapid.T) {
	if m.w.arts[0] == nil {
		return
	}
	rows, err := m.w.env.Pool.Query(m.ctx, `SELECT job_id, generation, ref, state,
		CASE WHEN recheck_at IS NULL THEN 0 WHEN recheck_at > statement_timestamp() THEN 1 ELSE 2 END
		FROM job_artifacts WHERE jobs_table = $1 ORDER BY id`, m.w.guard.TableKey())
	if err != nil {
		rt.Fatalf("read artifacts: %v", err)
	}
	var got []string
	for rows.Next() {
		var id, ref, state string
		var gen int64
		var recheck int
		if err := rows.Scan(&id, &gen, &ref, &state, &recheck); err != nil {
			rt.Fatalf("read artifacts: %v", err)
		}
		got = append(got, fmt.Sprintf("%s g%d %s %s recheck %d", id, gen, ref, state, recheck))
	}
	if err := rows.Err(); err != nil {
		rt.Fatalf("read artifacts: %v", err)
	}
	var want []string
	for _, a := range m.ref.arts {
		want = append(want, fmt.Sprintf("%s g%d %s %s recheck %d", a.job.id, a.gen, a.ref, a.state, a.recheck))
	}
	m.tally.invariants.Add(1)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		rt.Fatalf("artifacts after %s:\n got %q\nmodel %q", m.lastOp, got, want)
	}
	things, _, err := m.w.pairs(m.ctx, `SELECT ref, '' FROM things`)
	if err != nil {
		rt.Fatalf("read things: %v", err)
	}
	wantThings := map[string]string{}
	for ref := range m.ref.things {
		wantThings[ref] = ""
	}
	m.tally.invariants.Add(1)
	if !mapsEqual(things, wantThings) {
		rt.Fatalf("things after %s: %v, model %v", m.lastOp, keys(things), keys(wantThings))
	}
}
