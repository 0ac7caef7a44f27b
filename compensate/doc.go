// Package compensate undoes what a rejected execution left behind.
//
// A worker creates things before its completion is checked: an encoded file,
// a storage object, an asset row. When the completion is then rejected (the
// job was reclaimed, or a newer generation owns it) those things belong to
// no finished job. This package records each of them as an artifact tagged
// with the execution (job id and generation) and, once the execution can no
// longer complete, calls the compensator registered for its kind.
//
// What it guarantees:
//
//   - Record of a row artifact takes the caller's transaction, so the row
//     and its record commit together.
//   - Inside your transaction: Record joins it (that is its point for a
//     row); Finalize refuses it with jobguard.ErrInTransaction, as
//     Guard.Finalize does, and keeps or compensates nothing; compensation
//     and sweeps run on Config.DB, a pool, each artifact in a transaction
//     of its own, so an artifact is done only once its undo committed.
//   - Finalize marks the execution's artifacts kept in the same transaction
//     as the completion: kept artifacts are never compensated.
//   - When the completion is rejected, Finalize compensates exactly that
//     execution's artifacts (job id and generation), never another
//     generation's, before it returns.
//   - A compensator that fails leaves its artifact owed; Compensate (or
//     Run) retries it. Each artifact is compensated under its row lock in
//     its own short transaction (FOR UPDATE SKIP LOCKED), so any number of
//     sweepers can run at once and a done artifact is never compensated
//     again. A compensator that undoes a row through the given transaction
//     is exactly once; an external undo (deleting a file) is repeated only
//     if the commit after it fails, so it must be idempotent.
//   - The sweep also settles executions that never called Finalize (the
//     worker crashed): pending artifacts are kept once their job is
//     COMPLETED at their generation, and owed once their job is FAILED or at
//     another generation. Both are final for that execution, so the sweep
//     never races a live one.
//
// What it does not do:
//
//   - It needs a generation column: without one the artifacts of two
//     executions of a job cannot be told apart, and New refuses the guard.
//   - Artifacts of a job whose row was deleted stay pending: the sweep
//     cannot tell what became of that execution and does not guess.
//   - Record stores a job id as the jobs table's id column prints it (a
//     uuid in any case is one job) and refuses one that column cannot hold;
//     the sweep finds each artifact's job through the primary key.
//   - Failed compensations are retried every sweep, with no backoff.
//
// Why a package of its own: artifacts are a second table with their own
// lifecycle and a background sweep, which package jobguard, a set of
// conditional writes on the caller's jobs table, does not need. compensate
// imports jobguard and wraps its Finalize; jobguard knows nothing of it.
//
//	arts, err := compensate.New(ctx, compensate.Config{
//		Guard: guard, DB: pool,
//		Compensators: map[string]compensate.Func{
//			"file": func(ctx context.Context, _ pgx.Tx, a compensate.Artifact) error {
//				if err := os.Remove(a.Ref); err != nil && !errors.Is(err, fs.ErrNotExist) {
//					return err
//				}
//				return nil
//			},
//		},
//	})
//	// before creating the file:
//	err = arts.Record(ctx, pool, exec, "file", path)
//	// instead of guard.Finalize:
//	fin, err := arts.Finalize(ctx, pool, exec, spec)
//	// beside the reclaimer:
//	go arts.Run(ctx)
package compensate
