package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/testkit/history"
	"github.com/jobguard/jobguard/jobguard"
)

// Recorder appends one process's events to the run's history (see package
// history for where each is written and why there).
type Recorder struct {
	// Process names the process in its events.
	Process string
	calls   atomic.Int64
	// exec writes an event in a statement of its own, retried until it
	// lands: an acknowledged operation's outcome must not be lost.
	exec func(sql string, args ...any)
}

// NewRecorder returns the recorder of process, writing its own statements
// through exec.
func NewRecorder(process string, exec func(sql string, args ...any)) *Recorder {
	return &Recorder{Process: process, exec: exec}
}

// Call is one operation of a recorder, from its invoke to its outcome.
type Call struct {
	r          *Recorder
	id         int64
	op, job    string
	generation int64
}

// Invoke records that the process is about to run op on job, and returns
// the call its outcome is recorded under. It is committed before it
// returns.
func (r *Recorder) Invoke(op, job string, gen int64) Call {
	c := Call{r: r, id: r.calls.Add(1), op: op, job: job, generation: gen}
	r.write(history.Event{Call: c.id, Op: op, Kind: history.KindInvoke, JobID: job, Generation: gen})
	return c
}

// OK records, in tx, that the call took effect at generation gen: the
// event commits with the operation or not at all.
func (c Call) OK(ctx context.Context, tx pgx.Tx, gen int64) error {
	return c.r.OK(ctx, tx, c.id, c.op, c.job, gen, "")
}

// Outcome records how a call that did not take effect in its own
// transaction ended: refused, with the reason err gives, or failed.
func (c Call) Outcome(err error) {
	c.r.Outcome(c.id, c.op, c.job, c.generation, err)
}

// OK records in tx that op took effect on job at gen, under call (0 for an
// operation recorded without an invoke).
func (r *Recorder) OK(ctx context.Context, tx pgx.Tx, call int64, op, job string, gen int64, detail string) error {
	sql, args := history.Event{Process: r.Process, Call: call, Op: op, Kind: history.KindOK, JobID: job,
		Generation: gen, Detail: detail}.Insert()
	_, err := tx.Exec(ctx, sql, args...)
	return err
}

// Outcome records that op on job ended with err, under call: refused when
// err is a refusal, failed otherwise.
func (r *Recorder) Outcome(call int64, op, job string, gen int64, err error) {
	e := history.Event{Call: call, Op: op, Kind: history.KindFailed, JobID: job, Generation: gen, Detail: fmt.Sprint(err)}
	if reason, detail, ok := Refusal(err); ok {
		e.Kind, e.Reason, e.Detail = history.KindRefused, reason, detail
	}
	r.write(e)
}

// Sweep records a sweep's report: ok, or failed with err.
func (r *Recorder) Sweep(counts map[string]int, err error) {
	e := history.Event{Op: history.OpSweep, Kind: history.KindOK, Counts: counts}
	if err != nil {
		e.Kind, e.Detail = history.KindFailed, err.Error()
	}
	r.write(e)
}

// Crashed records that process was killed.
func Crashed(exec func(sql string, args ...any), process string) {
	sql, args := history.Event{Process: process, Op: "kill", Kind: history.KindCrashed}.Insert()
	exec(sql, args...)
}

func (r *Recorder) write(e history.Event) {
	e.Process = r.Process
	sql, args := e.Insert()
	r.exec(sql, args...)
}

// Refusal is the typed reason of a refused operation, as the history
// names it, and whether err is a refusal at all. A refusal whose reason
// the library could not tell is given as "unknown", which the checker
// counts as untyped.
func Refusal(err error) (reason, detail string, ok bool) {
	var se *jobguard.StateError
	switch {
	case errors.Is(err, jobguard.ErrStopped):
		return history.ReasonStopped, err.Error(), true
	case errors.Is(err, jobguard.ErrReclaimed):
		return history.ReasonReclaimed, err.Error(), true
	case errors.As(err, &se):
		switch se.Reason {
		case jobguard.ReasonStatus:
			return history.ReasonTerminal, se.Status, true
		case jobguard.ReasonSuperseded:
			return history.ReasonSuperseded, err.Error(), true
		case jobguard.ReasonNotFound:
			return history.ReasonNotFound, err.Error(), true
		case jobguard.ReasonUnread:
			return history.ReasonUnread, err.Error(), true
		}
		return "unknown", err.Error(), true
	case errors.Is(err, jobguard.ErrJobTerminal):
		return "unknown", err.Error(), true
	}
	return "", "", false
}
