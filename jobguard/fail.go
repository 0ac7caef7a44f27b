package jobguard

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/pgvalue"
)

// Fail writes FAILED with reason, only while the job is QUEUED or PROCESSING
// and, on a fenced table, still at exec's generation. Zero rows returns a
// *StateError wrapping ErrJobTerminal: a stale execution cannot fail a job it
// no longer owns.
//
// The reason is a message, often an error's or a panic's text: what text
// cannot hold of it (U+0000, bytes that are not UTF-8) is stored as the
// four characters \x00 and as U+FFFD, and a reason longer than a
// varchar(n) or char(n) column is cut to its first n characters, so that
// the job is failed whatever the message says.
func (g *Guard) Fail(ctx context.Context, db DB, exec Execution, reason string) error {
	return g.run(ctx, db, g.sql.fail, exec, pgvalue.StorableText(reason))
}

// Retry is an operator's explicit retry of a FAILED job: back to QUEUED, the
// failure reason cleared, progress and start time reset, and the generation
// bumped, so that no execution from before the retry can write again and a
// reclaim marker of an older generation no longer blocks the job. It returns
// the new generation. A job that is not FAILED is left alone and the error
// wraps ErrNotRetryable.
//
// On a table without a generation column the marker cannot be told apart
// from a fresh one: delete it with the marker store's Delete as well
// (package marker).
func (g *Guard) Retry(ctx context.Context, db DB, jobID string) (int64, error) {
	id, err := g.idArg(jobID)
	if err != nil {
		return 0, fmt.Errorf("jobguard: retry: %w", err)
	}
	var gen int64
	err = db.QueryRow(ctx, g.sql.retry.sql, id).Scan(&gen)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, g.refusal(ctx, db, g.sql.retry, id, Execution{JobID: jobID}, ErrNotRetryable)
	}
	if err != nil {
		return 0, fmt.Errorf("jobguard: retry: %w", err)
	}
	return gen, nil
}
