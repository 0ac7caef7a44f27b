package model

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"pgregory.net/rapid"

	"github.com/jobguard/jobguard/jobguard"
)

// cancel is an operator's Guard.Cancel of a job, queued, running or
// terminal, with or without an execution running it, on the pool or
// inside a caller's transaction that commits or rolls back. A cancel that
// commits fails the job under a new generation: its executions can save
// nothing, the start guard refuses it (ErrCancelled), the watchers hear
// of it, compensate owes what its executions recorded, and only Retry
// runs it again.
func (m *machine) cancel(rt *rapid.T) {
	_, j := m.pickJob(rt)
	id := m.spell(rt, j.id)
	reason := rapid.SampledFrom([]string{"", "customer asked", "nul \x00 byte", strings.Repeat("why ", 60)}).Draw(rt, "reason")
	in := rapid.SampledFrom([]string{"pool", "commit", "rollback"}).Draw(rt, "in")
	m.step(rt, "cancel ("+in+")")
	var db jobguard.DB = m.w.env.Pool
	var tx pgx.Tx
	if in != "pool" {
		var err error
		if tx, err = m.w.env.Pool.Begin(m.ctx); err != nil {
			rt.Fatalf("begin: %v", err)
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		db = tx
	}
	lost, err := m.w.guard.Cancel(m.ctx, db, id, reason)
	if !active(j.status) {
		m.expect(rt, "Cancel of a "+j.status.String()+" job", err, notCancellable)
		return
	}
	m.expect(rt, "Cancel", err, okay)
	want := jobguard.Execution{JobID: j.id}
	if m.ref.fenced {
		want.Generation = j.gen
	}
	if lost != want {
		rt.Fatalf("Cancel = %+v, want %+v", lost, want)
	}
	switch in {
	case "rollback":
		if err := tx.Rollback(m.ctx); err != nil {
			rt.Fatalf("rollback: %v", err)
		}
		return
	case "commit":
		if err := tx.Commit(m.ctx); err != nil {
			rt.Fatalf("commit: %v", err)
		}
	}
	text := m.w.guard.Shared().CancelledReason
	if reason != "" {
		text += ": " + reason
	}
	seen := j.gen
	m.ref.cancel(j, m.stored(text))
	m.tally.cancels.Add(1)
	m.noticed(rt, []lostJob{{job: j, seen: seen, cancelled: true}})
}
