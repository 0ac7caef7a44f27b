package jobguard

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// Op names a guarded operation in a StateError.
type Op string

// The guarded operations.
const (
	OpComplete Op = "complete"
	OpFail     Op = "fail"
	OpTouch    Op = "touch"
	OpRetry    Op = "retry"
	OpCancel   Op = "cancel"
	OpStart    Op = "start"
	OpCheck    Op = "check"
	OpResume   Op = "resume"
)

// guarded is one conditional write, built once by New: what it is, its SQL,
// and the statuses its WHERE accepts. The SQL names the statuses from
// allowed itself, so a refusal is always explained against the statuses the
// write was made with.
type guarded struct {
	op      Op
	sql     string   // $1 id, then the call's values, then the generation when fenced
	allowed []string // the statuses the write accepts
	fenced  bool     // the write carries the execution's generation
	queued  string   // the table's QUEUED, to tell a loss to another attempt
}

// run makes w as exec, with the call's own values after the id. Zero rows is
// a *StateError wrapping ErrJobTerminal, explained by a read right after.
func (g *Guard) run(ctx context.Context, db DB, w guarded, exec Execution, values ...any) error {
	id, args, err := g.writeArgs(w, exec, values...)
	if err != nil {
		return err
	}
	tag, err := db.Exec(ctx, w.sql, args...)
	if err != nil {
		return fmt.Errorf("jobguard: %s: %w", w.op, err)
	}
	return g.wrote(ctx, db, w, id, exec, tag)
}

// writeArgs returns w's arguments as exec, with the call's own values
// after the id, and the id as the column takes it.
func (g *Guard) writeArgs(w guarded, exec Execution, values ...any) (id any, args []any, err error) {
	id, err = g.idArg(exec.JobID)
	if err != nil {
		return nil, nil, fmt.Errorf("jobguard: %s: %w", w.op, err)
	}
	args = append(append(make([]any, 0, len(values)+2), id), values...)
	if w.fenced {
		args = append(args, exec.Generation)
	}
	return id, args, nil
}

// wrote judges w's answer: zero rows is a *StateError wrapping
// ErrJobTerminal, explained by a read through db right after.
func (g *Guard) wrote(ctx context.Context, db DB, w guarded, id any, exec Execution, tag pgconn.CommandTag) error {
	if tag.RowsAffected() == 0 {
		return g.refusal(ctx, db, w, id, exec, ErrJobTerminal)
	}
	return nil
}
