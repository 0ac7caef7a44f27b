package jobguard

import "context"

// Touch moves the job's updated_at, the progress signal the reclaimer reads,
// only while exec still owns a PROCESSING job. Zero rows returns a
// *StateError wrapping ErrJobTerminal: the execution has lost the job.
//
// Call it on evidence of progress, never on a timer; package heartbeat rate
// limits it per job.
func (g *Guard) Touch(ctx context.Context, db DB, exec Execution) error {
	return g.run(ctx, db, g.sql.touch, exec)
}

// TouchProgress is Touch that also stores percent in the progress column.
// On a table without one it is Touch.
func (g *Guard) TouchProgress(ctx context.Context, db DB, exec Execution, percent int) error {
	if g.table.ProgressColumn == "" {
		return g.Touch(ctx, db, exec)
	}
	return g.run(ctx, db, g.sql.touchProgress, exec, percent)
}
