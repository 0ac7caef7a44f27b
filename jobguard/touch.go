package jobguard

import (
	"context"
	"fmt"
)

// Touch moves the job's updated_at, the progress signal the reclaimer reads,
// only while exec still owns a PROCESSING job. Zero rows returns a
// *StateError wrapping ErrJobTerminal: the execution has lost the job.
//
// Call it on evidence of progress, never on a timer; package heartbeat rate
// limits it per job.
func (g *Guard) Touch(ctx context.Context, db DB, exec Execution) error {
	id, err := g.idArg(exec.JobID)
	if err != nil {
		return fmt.Errorf("jobguard: touch: %w", err)
	}
	args := []any{id, g.table.Statuses.Processing}
	if g.Fenced() {
		args = append(args, exec.Generation)
	}
	return g.write(ctx, db, "touch", g.sql.touch, args, exec, g.table.Statuses.Processing)
}

// TouchProgress is Touch that also stores percent in the progress column.
// On a table without one it is Touch.
func (g *Guard) TouchProgress(ctx context.Context, db DB, exec Execution, percent int) error {
	if g.table.ProgressColumn == "" {
		return g.Touch(ctx, db, exec)
	}
	id, err := g.idArg(exec.JobID)
	if err != nil {
		return fmt.Errorf("jobguard: touch: %w", err)
	}
	args := []any{id, g.table.Statuses.Processing, percent}
	if g.Fenced() {
		args = append(args, exec.Generation)
	}
	return g.write(ctx, db, "touch", g.sql.touchProgress, args, exec, g.table.Statuses.Processing)
}
