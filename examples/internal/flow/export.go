package flow

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/examples/internal/sim"
)

// Exports is the export processor: it renders a READY document to a file and
// records the export on the document. The document is the job's parent, but
// only its export status follows the job: a reclaimed export marks the
// export FAILED (the parent rule in ParentRules) and leaves the document
// READY, because the source was never broken.
type Exports struct {
	// Env is where the jobs and the documents live.
	Env *Env
	// Render is the export's external call.
	Render sim.Call
}

// EnqueueExport queues an export of document and marks its export QUEUED.
// The document's own status is not touched.
func EnqueueExport(ctx context.Context, e *Env, documentID string) (string, error) {
	var id string
	err := pgx.BeginFunc(ctx, e.Pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO jobs (type, parent_id) VALUES ($1, $2) RETURNING id::text`,
			TypeExport, documentID).Scan(&id); err != nil {
			return err
		}
		return setStatus(ctx, tx, `UPDATE documents SET export_status = 'QUEUED' WHERE id = $1`, documentID)
	})
	if err != nil {
		return "", fmt.Errorf("enqueue export of %s: %w", documentID, err)
	}
	return id, nil
}

// Process runs one delivery of an export job and returns the export's path.
func (x *Exports) Process(ctx context.Context, jobID string) (string, error) {
	e := x.Env
	exec, err := e.Starts.Start(ctx, e.Pool, jobID)
	if err != nil {
		return "", fmt.Errorf("export: %w", err)
	}
	var docID string
	if err := e.Pool.QueryRow(ctx, `SELECT parent_id FROM jobs WHERE id = $1`, jobID).Scan(&docID); err != nil {
		return "", fmt.Errorf("export: read job: %w", err)
	}
	// The render is external and slow: outside any transaction.
	if err := x.Render.Do(ctx); err != nil {
		return "", errors.Join(fmt.Errorf("export: render: %w", err),
			e.Guard.Fail(ctx, e.Pool, exec, "export: render: "+err.Error()))
	}
	path := fmt.Sprintf("exports/%s-g%d.pdf", docID, exec.Generation)
	err = e.Guard.CompleteTx(ctx, e.Pool, exec, func(tx pgx.Tx) error {
		return setStatus(ctx, tx, `UPDATE documents SET export_status = 'DONE', export_path = $2 WHERE id = $1`,
			docID, path)
	})
	if err != nil {
		return "", fmt.Errorf("export: save: %w", err)
	}
	return path, nil
}
