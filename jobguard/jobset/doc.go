// Package jobset reads and writes many jobs of a guard's table at once:
// what the services built on jobguard need (the reclaimer, the watcher,
// the operator command), and what a worker never calls. A worker
// completes, fails and touches one job at a time through jobguard.Guard;
// a service reads a set of rows, decides, and fails in one statement
// those still exactly as it read them.
//
// # What it guarantees
//
//   - One statement per call, built once when the guard was (New does no
//     I/O): Snapshot, Overdue, ActiveTypes, FinishedTypes, History and
//     Unstarted are one query each; FailIfUnchanged is one conditional
//     write. Settled is Snapshot in a transaction of its own, after its
//     lock_timeout is set.
//   - Settled reads rows whose last write's outcome its writer never
//     heard (a COMMIT sent, no answer) as that write left them: it waits,
//     until its context's deadline, for every transaction holding one of
//     them to end, committed or rolled back.
//   - FailIfUnchanged writes FAILED only to rows that still have exactly
//     the status, updated_at and (on a fenced table) generation that were
//     read. A row that moved is left alone (Moved); a row another
//     transaction holds is skipped, never waited for (Locked). Given a
//     pgx.Tx it is part of the caller's transaction.
//   - Orphans (built once per workers table) reads the PROCESSING jobs
//     whose owner's lease (package lease) is not live, through the
//     bundled migration's partial index over the owned running jobs, and
//     Rescue sends back to QUEUED, in one conditional write, those that
//     still run the execution read (status, generation, owner) under a
//     lease still not live: a new generation, no owner, no start, a
//     reason the start guard does not refuse. Locked rows are skipped.
//   - Time is the database's: each Job carries ReadAt, the statement's
//     clock, so the age of its UpdatedAt and StartedAt is measured on the
//     clock that stamped them; Overdue and History compare on it too.
//   - Cost grows with the rows acted on: Overdue, History, Unstarted and
//     the type scans read index ranges of the bundled migration's partial
//     indexes (the plans are pinned by tests in package jobguard).
//   - Ids are the guard's canonical ones: every id returned is spelled as
//     the column prints it, and every id given is read in any spelling
//     (jobguard.Guard.CanonicalID).
//
// # What it does not guarantee
//
//   - Nothing here is fenced by an execution: FailIfUnchanged's guard is
//     the row as read, not a generation the caller owns. A worker's own
//     writes belong on jobguard.Guard.
//   - Overdue, History and Unstarted need a started-at column
//     (ErrNoStartedAt); on a table without a type column every job is of
//     type "".
//
// # Why a package of its own
//
// The statements are built from jobguard's catalog of the table, which is
// unexported; they reach this package through an internal link, so that
// jobguard's API stays what a worker reads and this one is documented
// for the services that use it.
//
//	set := jobset.New(guard)
//	rows, err := set.Overdue(ctx, pool, jobset.OverdueQuery{Limits: limits, Max: 500})
//	res, err := set.FailIfUnchanged(ctx, tx, rows, guard.Shared().ReclaimedReason)
package jobset
