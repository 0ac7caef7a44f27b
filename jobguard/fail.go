package jobguard

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Fail writes FAILED with reason, only while the job is QUEUED or PROCESSING
// and, on a fenced table, still at exec's generation. Zero rows returns a
// *StateError wrapping ErrJobTerminal: a stale execution cannot fail a job it
// no longer owns.
func (g *Guard) Fail(ctx context.Context, db DB, exec Execution, reason string) error {
	id, err := g.idArg(exec.JobID)
	if err != nil {
		return fmt.Errorf("jobguard: fail: %w", err)
	}
	s := g.table.Statuses
	args := []any{id, s.Failed, reason, s.Queued, s.Processing}
	if g.Fenced() {
		args = append(args, exec.Generation)
	}
	return g.write(ctx, db, "fail", g.sql.fail, args, exec, s.Queued, s.Processing)
}

// Retry is an operator's explicit retry of a FAILED job: back to QUEUED, the
// failure reason cleared, progress and start time reset, and the generation
// bumped, so that no execution from before the retry can write again and a
// reclaim marker of an older generation no longer blocks the job. It returns
// the new generation. A job that is not FAILED is left alone and the error
// wraps ErrNotRetryable.
//
// On a table without a generation column the marker cannot be told apart
// from a fresh one: delete it with MarkerStore.Delete as well.
func (g *Guard) Retry(ctx context.Context, db DB, jobID string) (int64, error) {
	id, err := g.idArg(jobID)
	if err != nil {
		return 0, fmt.Errorf("jobguard: retry: %w", err)
	}
	s := g.table.Statuses
	var gen int64
	err = db.QueryRow(ctx, g.sql.retry, id, s.Queued, s.Failed).Scan(&gen)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, g.refusal(ctx, db, "retry", id, Execution{JobID: jobID}, ErrNotRetryable, s.Failed)
	}
	if err != nil {
		return 0, fmt.Errorf("jobguard: retry: %w", err)
	}
	return gen, nil
}
