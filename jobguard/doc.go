// Package jobguard decides what a late result may still change.
//
// A recovery service marks a long-stalled job FAILED, but the worker's
// external call (a model call, an encode) was only slow: it returns, and an
// unconditional "UPDATE jobs SET status = 'COMPLETED'" brings the reclaimed
// job back to life, lands its generated rows in product tables and bills its
// usage. jobguard puts the condition inside the write instead.
//
// # What it guarantees
//
//   - Conditional completion. CompleteIfActive writes COMPLETED only while the
//     job is QUEUED or PROCESSING; CompleteIfProcessing only from PROCESSING.
//     Zero rows affected returns a *StateError wrapping ErrJobTerminal, which
//     says why (not found, which status, superseded generation). CompleteTx
//     makes the completion the first write of the save transaction, so a
//     refused completion leaves none of the caller's rows.
//   - Generations (fencing tokens). StartGuard.Start bumps the row's
//     generation and returns it in an Execution; every later write of that
//     execution (complete, fail, touch) carries "AND generation = $g". A job
//     restarted by any path gets a new generation, so a stale execution can
//     change nothing even when the status looks right.
//   - A start guard. StartGuard refuses, with a permanent *ReclaimedError
//     wrapping ErrReclaimed, a job whose failure reason or reclaim marker
//     says it was reclaimed. The markers live where Shared.Markers says: in
//     a table of the jobs' database (the default; marker.Migration), which
//     Start reads inside its conditional statement, or in Redis (package
//     marker holds both stores). Start never moves a FAILED job back to PROCESSING;
//     only Retry (an operator's explicit retry) does, and it bumps the
//     generation so old markers stop applying.
//   - An operator's cancel. Guard.Cancel fails a QUEUED or PROCESSING job
//     with the reason "<Shared.CancelledReason>: <why>", bumps its
//     generation (the running execution can save nothing) and, in the same
//     statement, sends the watchers' notice over LISTEN/NOTIFY, delivered
//     only if the cancel commits. The start guard refuses a cancelled job
//     with a permanent *CancelledError wrapping ErrCancelled, in Start's
//     own statement too, so a row another path moved back stays refused;
//     Retry undoes a cancel as it undoes a reclaim.
//   - Finalize. A re-check, the conditional completion in its own short
//     transaction, then, once it has committed, the caller's metadata
//     updates in parallel; the Finalized result is Confirmed only when the
//     completion committed and every update succeeded, and it cannot be
//     forged outside this package (package usage bills only confirmed
//     results). "Confirmed" means committed: Finalize refuses a caller's
//     transaction rather than report a completion that may roll back.
//     Resume finishes a finalize whose completion committed earlier (its
//     worker died, an update failed): it runs the updates again only for a
//     job COMPLETED at the execution's generation. Package settle records
//     what each finalize still owes, in the completion's transaction, and
//     resumes it from a sweep, so that usage is billed exactly once.
//   - Bad input is refused before SQL is sent: a mapping that does not match
//     the catalog fails in New, a malformed job id fails with ErrInvalidJobID.
//     Identifiers are quoted once; values are always parameters.
//
// # What it does not guarantee
//
//   - The external call is not undone. A refused completion stops the result
//     from landing; it does not refund the model call or the encode that
//     produced it. Package watch cancels a call that honours its context as
//     soon as the job is reclaimed; files and rows made before the completion
//     check stay unless they are recorded as artifacts (package compensate).
//   - A table without a generation column runs in status-only mode: a stale
//     execution of a job that another path moved back to PROCESSING can still
//     complete it. Map a generation column (DefaultTable does) to close that.
//   - Reclaim markers expire (7 days by default). With markers in Redis,
//     under the default FailOpen policy a failed Redis lookup lets a job
//     through with a warning; the database reason is still checked inside
//     Start's conditional UPDATE. With markers in Postgres the marker is
//     read in Start's statement, and only a marker table that cannot be
//     read (dropped, or no privilege on it) fails the lookup; the policy
//     applies to it alike.
//     Expired marker rows stay in the table until something deletes them.
//   - Metadata updates after Finalize's completion are not one transaction
//     with it: when some fail, the completion and the successful updates stay.
//
// # Using it
//
//	// once: apply jobguard.Migration (or map your table) and marker.Migration
//	guard, err := jobguard.New(ctx, pool, jobguard.DefaultTable())
//	starts, err := jobguard.NewStartGuard(guard, nil, jobguard.StartGuardConfig{}) // no Redis needed
//
//	exec, err := starts.Start(ctx, pool, jobID) // refuses reclaimed jobs
//	if jobguard.IsPermanent(err) { /* tell the queue not to retry */ }
//	result := callTheModel(ctx)                 // outside any transaction
//	err = guard.CompleteTx(ctx, pool, exec, func(tx pgx.Tx) error {
//		return saveChapters(ctx, tx, result)    // only runs if completion won
//	})
//
// Migration holds the SQL of the default table; Table maps a table of your
// own, including Prisma-style names and a Postgres enum for the status.
//
// # One job, one id
//
// A caller may spell a job's id in any way its id column reads as the same
// value: a uuid in upper case or in braces, "+0042" or " 42" for an integer
// column. Every entry point reads each of them (CanonicalID says which)
// and works, returns and keys under one spelling, the one the column
// prints: the Execution that Start, Finalize and Resume return, the job
// named in every error, the reclaim markers, the notices, the heartbeat's
// slots, the watcher's executions, the side tables' rows (usage's ledger,
// settle's records, compensate's artifacts) and the reclaimer's reports.
// One job spelled two ways is never two ledger rows, so never two bills.
// An id the column cannot hold is refused with ErrInvalidJobID, by every
// entry point alike, before any SQL is sent. A text id column must have a
// deterministic collation: New refuses one under which two spellings could
// be one row.
//
// # Several jobs tables
//
// A job is one job of one table: job 42 of the tasks is not export 42.
// Guard.TableKey names the table (its schema and name as the catalog holds
// them, "public"."tasks"), and everything kept outside the table keys a job
// by both: the side tables of usage, settle and compensate, the markers
// and the notices. Any number of jobs tables may therefore share the
// default side tables, a Redis prefix and a notice channel; only the
// reclaimer's LeaderKey must differ per table.
//
// # Settings every process shares
//
// The reclaimer writes what the workers read: reclaim markers (in Postgres
// or under a Redis prefix, Shared.Markers), a failure reason, notices on a channel; its replicas elect a
// leader with an advisory lock key. These settings are a Shared, set on the
// Guard with NewWithConfig; the start guard, the reclaimer, the watcher and
// the notice publisher all take them from the guard they are built with,
// and none has a setting of its own for them. Build the guard from one
// place every service imports, and they cannot disagree.
//
// # Which write do I call
//
//   - CompleteIfActive: the first statement of a save transaction of your
//     own; COMPLETED from QUEUED or PROCESSING.
//   - CompleteIfProcessing: the same, for a path that must not complete a
//     job that never started.
//   - CompleteTx: the save transaction itself, with CompleteIfActive first
//     and your writes after it; the usual choice.
//   - Finalize: the completion in its own transaction, then metadata
//     updates elsewhere once it committed, with a result that says whether
//     all of it happened (what usage billing needs).
//   - compensate's Finalize: Finalize that also undoes the files and rows
//     the execution made if its completion is refused.
//   - Fail, Touch, TouchProgress: the execution's own failure and progress;
//     Retry: an operator's retry of a FAILED job.
//
// The set-oriented reads and writes of the services built on the guard
// (the reclaimer, the watcher, the operator command) live apart, in
// package jobset; the reclaim markers' stores in package marker.
//
// # Three Finalizes, two Updates
//
// Three methods are called Finalize because they make one promise: the
// re-check, the conditional completion in its own transaction, then the
// metadata updates once it committed, with a result that is Confirmed
// only if all of it happened. They differ in what else they keep:
//
//   - Guard.Finalize (this package): the promise alone. Its updates are
//     Update values, a name and a func, run in this process right after
//     the commit; a worker that dies before they ran leaves them undone,
//     and Resume runs them again for a caller that knows they are owed.
//   - settle.Settler.Finalize: the promise with a record of what it owes,
//     written in the completion's transaction, so that its sweep finishes
//     a finalize whose worker died. Its updates are settle.Update values:
//     a handler's name and JSON arguments, data that a record can hold
//     and another process can run, where an Update here is code.
//   - compensate.Artifacts.Finalize: the promise with the execution's
//     artifacts settled: kept with the completion, or undone (compensated)
//     when the completion is refused. It takes this package's
//     FinalizeSpec and returns its Finalized.
//
// Pick the one whose extra guarantee you need; their docs say the rest.
//
// # Inside your transaction
//
// Every call takes a DB, which may be your pgx.Tx. What that means differs
// by call, and each says so in its doc:
//
//   - CompleteIfActive, CompleteIfProcessing, Fail, Retry, Touch,
//     TouchProgress, StartGuard.Start and Check are single statements:
//     given a pgx.Tx they are part of your transaction and take effect when
//     you commit, with your other writes. A nil error means they were
//     written there, not that they committed.
//   - CompleteTx given a pgx.Tx runs as a savepoint of it: the completion
//     and fn's writes commit when you commit, or not at all.
//   - Finalize and Resume refuse a pgx.Tx with ErrInTransaction before
//     anything runs. What they report (Completed, Confirmed) and what they
//     run afterwards (the updates, and the usage billed from the result)
//     must follow a commit, and inside your transaction that commit happens
//     after they return, if at all.
//   - A connection (*pgx.Conn, *pgxpool.Conn) on which a transaction is open
//     that you do not pass as its pgx.Tx (a plain BEGIN, say) is refused
//     with ErrInTransaction by every call that begins a transaction
//     (CompleteTx, Finalize, usage.Accrue): the server would ignore their
//     BEGIN, and their COMMIT would commit your transaction for you.
//
// A wrapper of your own around a transaction is not recognized: pass the
// pgx.Tx itself, or a pool.
//
// # Metrics
//
// Every guard decision can be counted through the OpenTelemetry metric API.
// NewWithConfig with GuardConfig.MeterProvider counts completions
// (jobguard.completions, by outcome and refusal reason);
// StartGuardConfig.MeterProvider counts starts refused as reclaimed
// (jobguard.start.refusals, by source) and failed lookups
// (jobguard.start.lookup_errors, by lookup and policy). The heartbeat,
// reclaim, usage and compensate packages take a MeterProvider in their
// Config too. A nil provider records nothing and costs an empty call.
package jobguard
