package model

import (
	"context"
	"errors"
	"fmt"
	"time"

	"pgregory.net/rapid"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

// watched is an execution's watched context, and what the model says of it.
type watched struct {
	ctx     context.Context
	release context.CancelFunc
	gone    bool // released: its process crashed, the model no longer asks
	ended   bool // its execution ended the job itself: no longer watched
	lost    bool // it must be cancelled, with this cause
	via     watch.Via
	seen    int64
	status  string
	// cancelled: the notice was a cancel's, or the check read a cancel's
	// failure reason.
	cancelled bool
}

// lostJob is a job a notice names: at the generation seen, by a cancel or
// not.
type lostJob struct {
	job       *job
	seen      int64
	cancelled bool
}

// deliveryPatience bounds the wait for a notice to reach the watcher: a
// deadline for polling, never a measure of anything.
const deliveryPatience = time.Minute

// watcherOf starts the world's watcher, on the Postgres transport, with
// a check interval no sequence reaches: its checks are the model's
// operations. A table without a generation column has none.
func (w *world) watcherOf(ctx context.Context) error {
	if w.table.GenerationColumn == "" {
		return nil
	}
	var err error
	if w.notices, err = watch.NewPublisher(w.guard, watch.Transport{Postgres: w.env.Pool}); err != nil {
		return err
	}
	w.watcher, err = watch.New(watch.Config{Guard: w.guard, DB: w.env.Pool, Transport: watch.Transport{Postgres: w.env.Pool},
		CheckInterval: 24 * time.Hour, Logger: quiet})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); _ = w.watcher.Run(rctx) }()
	w.t.Cleanup(func() { cancel(); <-done })
	select {
	case <-w.watcher.Ready():
		return nil
	case <-time.After(deliveryPatience):
		return errors.New("the watcher never subscribed")
	}
}

// watch watches a started execution, under the spelling it was started by.
func (m *machine) watch(e *exec, id string) {
	if m.w.watcher == nil {
		return
	}
	ctx, release := m.w.watcher.Watch(context.Background(), jobguard.Execution{JobID: id, Generation: e.gen})
	e.watch = &watched{ctx: ctx, release: release}
}

// unwatch releases every watch of the sequence.
func (m *machine) unwatch() {
	for _, e := range m.ref.execs {
		if e.watch != nil && !e.watch.gone {
			e.watch.release()
			e.watch.gone = true
		}
	}
}

// noticed is what the notices of a reclaim, a rescue or a cancel do:
// every watched execution of a job named at its generation or an older
// one is cancelled. It waits, with a deadline, until they are.
func (m *machine) noticed(rt *rapid.T, named []lostJob) {
	var wait []*watched
	for _, n := range named {
		for _, e := range m.ref.execs {
			v := e.watch
			if v == nil || v.gone || v.ended || v.lost || m.ref.jobs[e.job] != n.job || e.gen > n.seen {
				continue
			}
			v.lost, v.via, v.seen, v.status, v.cancelled = true, watch.ViaNotice, n.seen, "", n.cancelled
			wait = append(wait, v)
			m.tally.byNotice.Add(1)
		}
	}
	deadline := time.After(deliveryPatience)
	for _, v := range wait {
		select {
		case <-v.ctx.Done():
		case <-deadline:
			rt.Fatalf("a notice did not cancel a watched execution within %s", deliveryPatience)
		}
	}
}

// watchCheck is the watcher's periodic check: it must catch what the
// notices missed (a notice dropped), and leave alone the executions that
// ended their job themselves.
func (m *machine) watchCheck(rt *rapid.T) {
	if m.w.watcher == nil {
		rt.Skip("no watcher")
	}
	m.step(rt, "watch.Check")
	n, err := m.w.watcher.Check(m.ctx)
	if err != nil {
		rt.Fatalf("watch check: %v", err)
	}
	want := 0
	for _, e := range m.ref.execs {
		v := e.watch
		if v == nil || v.gone || v.ended || v.lost {
			continue
		}
		j := m.ref.jobs[e.job]
		switch {
		case j.gen != e.gen:
		case j.status == processing:
			continue
		case j.status == completed, j.status == failed && !m.reclaimedReason(j.reason) && !m.cancelledReason(j.reason):
			v.ended = true
			continue
		}
		v.lost, v.via, v.seen, v.status = true, watch.ViaCheck, j.gen, m.w.statusWord(j.status)
		v.cancelled = j.hasReason && m.cancelledReason(j.reason)
		want++
		m.tally.byCheck.Add(1)
	}
	if n != want {
		rt.Fatalf("watch check cancelled %d executions, model %d", n, want)
	}
}

// checkWatched compares every watched context with the model: cancelled
// exactly when lost, with the cause that says how and which generation.
func (m *machine) checkWatched(rt *rapid.T) {
	for _, e := range m.ref.execs {
		v := e.watch
		if v == nil || v.gone {
			continue
		}
		m.tally.invariants.Add(1)
		j := m.ref.jobs[e.job]
		if !v.lost {
			if v.ctx.Err() != nil {
				rt.Fatalf("the watched execution of job %q generation %d was cancelled (%v); the model has it %s",
					j.id, e.gen, context.Cause(v.ctx), map[bool]string{true: "ended by itself", false: "owning its job"}[v.ended])
			}
			continue
		}
		var lost *watch.LostError
		cause := context.Cause(v.ctx)
		if v.ctx.Err() == nil || !errors.As(cause, &lost) || jobguard.IsPermanent(cause) == lost.Requeued {
			rt.Fatalf("the lost execution of job %q generation %d: context %v, cause %v", j.id, e.gen, v.ctx.Err(), cause)
		}
		// The check says when the job went back to the queue; the
		// heartbeat's refusal too; a notice never does.
		if want := v.via == watch.ViaCheck && m.ref.fenced && v.status == m.w.statusWord(queued) && v.seen > e.gen; v.via != watch.ViaHeartbeat && lost.Requeued != want {
			rt.Fatalf("the lost execution of job %q generation %d: requeued %v, want %v (%v)", j.id, e.gen, lost.Requeued, want, cause)
		}
		got := fmt.Sprintf("%s g%d via %v seen %d status %q cancelled %v (ErrCancelled %v)", lost.JobID, lost.Generation, lost.Via,
			lost.Seen, lost.Status, lost.Cancelled, errors.Is(cause, jobguard.ErrCancelled))
		want := fmt.Sprintf("%s g%d via %v seen %d status %q cancelled %v (ErrCancelled %v)", j.id, e.gen, v.via, v.seen, v.status,
			v.cancelled, v.cancelled)
		if got != want {
			rt.Fatalf("the watcher reports %s, model %s", got, want)
		}
	}
}
