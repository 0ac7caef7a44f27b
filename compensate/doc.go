// Package compensate undoes what a rejected execution left behind.
//
// A worker creates things before its completion is checked: an encoded file,
// a storage object, an asset row. When the completion is then rejected (the
// job was reclaimed or cancelled by an operator, or a newer generation owns
// it) those things belong to no finished job. This package records each of them as an artifact tagged
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
//   - An artifact belongs to a job of one jobs table: it is keyed by the
//     table (jobguard.Guard.TableKey) as well as the execution, and an
//     Artifacts keeps, owes and compensates only its Guard's table's. Any
//     number of jobs tables may share the artifacts table (job 42 of two
//     integer-id tables never decide each other's artifacts); only the
//     sparing of a thing that another execution holds (its kind and ref)
//     looks across tables, since a thing is one thing whoever made it.
//     Each jobs table needs its own sweeper (Compensate, Run).
//   - A compensator that fails leaves its artifact owed; Compensate (or
//     Run) retries it. Each artifact is compensated under its row lock in
//     its own short transaction (FOR UPDATE SKIP LOCKED), so any number of
//     sweepers can run at once and never compensate one artifact at the
//     same time.
//   - A compensator that panics fails as one that returns an error does:
//     its writes through tx roll back, the artifact stays owed with
//     "panic: " and the value as its last error, the warning carries the
//     stack, and the next sweep retries it. The panic never reaches Run's
//     goroutine, nor a worker's Finalize; a panicking logger or meter does
//     not stop Run either.
//   - A thing created after its compensation is removed too. The sweep may
//     compensate an artifact before its execution, still running, creates
//     it (the upload was on its way when the job was reclaimed). So every
//     compensated artifact is compensated once more, Config.RecheckAfter
//     later by the database's clock: the recheck is scheduled, and found
//     due, on statement_timestamp(), so sweepers whose clocks disagree agree
//     on it (one whose clock ran ahead would recheck at once, before the
//     upload lands); a rejected Finalize, and CompensateExecution,
//     compensate the execution's artifacts again at once, since the
//     execution has stopped; and Record refuses an artifact that was
//     compensated already with ErrCompensated, so the execution learns it
//     lost the job before it creates the thing. Compensators therefore run more than once per
//     artifact and must be idempotent (a missing file is done; a row
//     deleted by id is gone).
//   - One execution's compensation never removes what another may keep.
//     When two executions record the same kind and ref (a path per job
//     rather than per execution, an upserted row), an artifact is not
//     undone while another execution's artifact of that ref may still be
//     kept, or was: it is marked done and counted Spared. Record and
//     compensation hold a transaction lock on the ref, so a thing is never
//     recorded, then created, while another execution's compensation is
//     removing it.
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
//   - Record, Keep, Finalize and CompensateExecution key a job by the id
//     as the jobs table's id column prints it (jobguard.Guard.CanonicalID:
//     every spelling of a job is one job) and refuse one that column cannot
//     hold; the sweep finds each artifact's job through the primary key.
//   - Failed compensations are retried every sweep, with no backoff.
//   - A thing that a lost execution creates more than RecheckAfter after
//     its last compensation, without recording it again, stays: nothing
//     tells the sweep to look once more. Set RecheckAfter beyond the
//     longest write a worker can leave in flight.
//   - Two executions that create the same thing can overwrite each other's
//     content: a late execution's upload can replace the output that a
//     newer one completed with, and sparing it keeps the late content. Give
//     each execution refs of its own (put the generation in a path), or
//     make the thing carry its owner (a row's job id and generation) and
//     the compensator conditional on it.
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
//	// before creating the file, at a path of this execution's own:
//	path := fmt.Sprintf("videos/%s-g%d.mp4", videoID, exec.Generation)
//	if err := arts.Record(ctx, pool, exec, "file", path); err != nil {
//		return err // ErrCompensated: the job was lost; do not create it
//	}
//	// instead of guard.Finalize:
//	fin, err := arts.Finalize(ctx, pool, exec, spec)
//	// beside the reclaimer:
//	go arts.Run(ctx)
//
// Artifacts.Finalize is one of three Finalizes: the package doc of
// jobguard, "Three Finalizes, two Updates", sets them side by side.
package compensate
