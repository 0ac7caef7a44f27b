package flow

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/examples/internal/sim"
	"github.com/jobguard/jobguard/jobguard"
)

// Exports is the export processor: it renders a READY document to a file and
// records the export on the document. The document is the job's parent, but
// only its export status follows the job: a reclaimed export marks the
// export FAILED (the parent rule in ParentRules) and leaves the document
// READY, because the source was never broken.
type Exports struct {
	// Guard guards the jobs table: it completes the jobs (the save's first
	// write) and fails them.
	Guard *jobguard.Guard
	// Starts starts each delivery as a new execution, and refuses a job
	// that was reclaimed.
	Starts *jobguard.StartGuard
	// DB reaches the jobs and the documents, such as the process's pool.
	DB jobguard.DB
	// Render is the export's external call.
	Render sim.Call
}

// EnqueueExport queues an export of document and marks its export QUEUED.
// The document's own status is not touched.
func EnqueueExport(ctx context.Context, db jobguard.DB, documentID string) (string, error) {
	var id string
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
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
	exec, err := x.Starts.Start(ctx, x.DB, jobID)
	if err != nil {
		return "", fmt.Errorf("export: %w", err)
	}
	var docID string
	if err := x.DB.QueryRow(ctx, `SELECT parent_id FROM jobs WHERE id = $1`, jobID).Scan(&docID); err != nil {
		return "", fmt.Errorf("export: read job: %w", err)
	}
	// The render is external and slow: outside any transaction.
	if err := x.Render.Do(ctx); err != nil {
		return "", giveUp(ctx, x.Guard, x.DB, exec, fmt.Errorf("export: render: %w", err), "export: render: "+err.Error())
	}
	path := fmt.Sprintf("exports/%s-g%d.pdf", docID, exec.Generation)
	err = x.Guard.CompleteTx(ctx, x.DB, exec, func(tx pgx.Tx) error {
		return setStatus(ctx, tx, `UPDATE documents SET export_status = 'DONE', export_path = $2 WHERE id = $1`,
			docID, path)
	})
	if err != nil {
		return "", fmt.Errorf("export: save: %w", err)
	}
	return path, nil
}
