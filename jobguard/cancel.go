package jobguard

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/pgvalue"
)

// CancelledError is the start guard's refusal of a job an operator
// cancelled: it wraps ErrCancelled and carries the recorded reason.
type CancelledError struct {
	JobID string
	// Reason is the recorded failure reason, which begins with
	// Shared.CancelledReason.
	Reason string
}

// Error names the job and the reason it was cancelled with.
func (e *CancelledError) Error() string {
	return fmt.Sprintf("%v: job %s (%q); only an operator's retry runs it again", ErrCancelled, e.JobID, e.Reason)
}

// Unwrap returns ErrCancelled.
func (e *CancelledError) Unwrap() error { return ErrCancelled }

// cancelStatement builds Cancel's one statement: the conditional write,
// and the notice of the execution that lost the job, in the watchers'
// format (package watch), sent with pg_notify in the same statement, so
// that it goes out when, and only if, the write commits. The notice names
// the generation the job had, which the write bumps past.
func cancelStatement(t Table, cat catalog, st Statuses, bump, genOut string) guarded {
	q, lit := ident.Quote, ident.Literal
	lostGen := "0::int8"
	if t.GenerationColumn != "" {
		lostGen = "c.generation - 1"
	}
	return guarded{op: OpCancel, allowed: []string{st.Queued, st.Processing}, sql: fmt.Sprintf(
		`WITH c AS (UPDATE %s SET %s = %s, %s = %s, %s = %s%s WHERE %s = $1 AND %s IN (%s, %s) RETURNING %s AS generation)`+
			` SELECT c.generation, pg_notify($3, json_build_array(json_build_object(`+
			`'job_id', $4::text, 'generation', %s, 'table', $5::text, 'cancelled', true))::text) FROM c`,
		t.QualifiedName(), q(t.StatusColumn), lit(st.Failed), q(t.FailureReasonColumn),
		cat.columns[t.FailureReasonColumn].fitted("$2"), q(t.UpdatedAtColumn), nowExpr(cat.columns[t.UpdatedAtColumn]), bump,
		q(t.IDColumn), q(t.StatusColumn), lit(st.Queued), lit(st.Processing), genOut, lostGen)}
}

// Cancel is an operator's cancel: stop the job, and do not run it again.
// In one conditional statement, only while the job is QUEUED or
// PROCESSING, it writes FAILED with the reason "<Shared.CancelledReason>:
// <reason>" (CancelledReason alone when reason is empty; stored as Fail
// stores its reason, cut to a varchar(n) column) and bumps the
// generation, so that the running execution can save nothing, even if
// another path moves the job back to PROCESSING. The start guard then
// refuses the job with a *CancelledError wrapping ErrCancelled, which is
// permanent; Retry undoes the cancel.
//
// The same statement sends the watchers a notice over Postgres
// LISTEN/NOTIFY (Shared.NoticeChannel) naming the execution that lost the
// job, so a watcher cancels its context at once; given a pgx.Tx, the
// notice goes out with its commit, and never if it rolls back. With
// notices over Redis, publish the returned Execution once the cancel has
// committed (watch.Publisher's PublishCancelled); a watcher's periodic
// check finds the cancel either way.
//
// It returns the execution that lost the job: the job's canonical id and
// the generation it had (0 on a table without a generation column). A job
// that is COMPLETED or FAILED, a cancelled one included, or that does not
// exist, is left alone, and the error is a *StateError wrapping
// ErrNotCancellable.
func (g *Guard) Cancel(ctx context.Context, db DB, jobID, reason string) (Execution, error) {
	id, err := g.idArg(jobID)
	if err != nil {
		return Execution{}, fmt.Errorf("jobguard: cancel: %w", err)
	}
	text := g.shared.CancelledReason
	if reason != "" {
		text += ": " + reason
	}
	lost := Execution{JobID: canonicalID(id)}
	var gen int64
	err = db.QueryRow(ctx, g.sql.cancel.sql, id, pgvalue.StorableText(text), g.shared.NoticeChannel, lost.JobID, g.TableKey()).
		Scan(&gen, nil)
	if errors.Is(err, pgx.ErrNoRows) {
		return Execution{}, g.refusal(ctx, db, g.sql.cancel, id, lost, ErrNotCancellable)
	}
	if err != nil {
		return Execution{}, fmt.Errorf("jobguard: cancel: %w", err)
	}
	if g.Fenced() {
		lost.Generation = gen - 1
	}
	return lost, nil
}
