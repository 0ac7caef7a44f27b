// Package chaos is the reliability run of jobguard: several worker
// processes process chapter and video jobs through the public API while
// workers are killed, connections are terminated, Redis goes away, calls
// hang past their limit and two reclaimers sweep at once, one of them on a
// clock two seconds ahead, and some jobs' ids are handed over in upper
// case; then every invariant of the design is checked from the database
// and Redis.
//
// Each worker process holds a worker lease (package lease, a short TTL,
// Timing.WorkerTTL) and starts every job under it, so the jobs table
// records which process runs each execution; the reclaimers rescue the
// running jobs of a process whose lease lapsed (reclaim.Config.Workers),
// mostly before the limit and progress rule would reclaim them. Of the
// driver's SIGKILLs some are answered by the rescue, some by a reclaim,
// some by the queue's redelivery; one time in four the driver SIGSTOPs
// the worker instead, waits until its lease has lapsed on the database's
// clock and its jobs were rescued, and SIGCONTs it: its executions come
// back to heartbeats and saves the generation refuses, and the process,
// told its lease is lost, starts nothing more and exits. A worker whose
// lease a loaded machine let lapse does the same, and is replaced. The
// operator cancels running and queued jobs at random (Guard.Cancel) and
// retries some cancelled ones. The checks follow: a rescue takes only a
// running job whose owner's lease was not live (the lease's last expiry,
// which only a live lease can move, is not after the rescue), and only of
// a process the driver killed or stopped or that said it lost its lease;
// the rescued generation writes nothing more and the job completes once,
// on another worker; a cancelled job completes, bills and leaves product
// rows no more unless a Retry reopened it.
//
// The run itself is TestChaos (go test ./internal/testkit/chaos/), with the
// reclaim markers in a private Redis. TestChaos_PostgresOnly is a shorter
// run with no Redis reachable at all, as a deployment without one: the
// markers in the marker table, written by the reclaim's statement; the
// reclaim notices sent with NOTIFY to a watch.Watcher in every worker,
// which cancels the call of a reclaimed execution (half the calls honour
// it and stop; the other half return late and meet the guarded
// completion); every process built with a nil Redis client and the Redis
// URL on a closed port. Its faults are the database's: besides the kills
// and the terminated worker transactions, the listening sessions are
// terminated (notices are missed until the watchers resubscribe and
// check) and so are the reclaimers' sessions in the middle of a sweep.
// Check reads its markers from the marker table, where every reclaim must
// have one.
//
// The test binary
// re-executes itself as the worker processes; this package holds what both
// sides share:
//
//   - Schema: the run's product tables, a small visibility-timeout queue
//     (FOR UPDATE SKIP LOCKED), and append-only audit tables filled by
//     deferred triggers on the jobs and parent tables. Every writer names
//     itself in a transaction-local setting (chaos.actor, chaos.writer_gen),
//     so "no write by a superseded generation" and "FAILED leaves only
//     through Retry" are read from real history, not from what a worker
//     believed.
//   - Plan: each job's faults (hang, slow, very slow, a pause inside the save
//     transaction, a deleted video, a failing metadata update) and inputs (an
//     id in upper case, a video finalized with no metadata update), drawn
//     from the run's seed and stored in the job's payload.
//   - RunWorker: the worker loop. StartGuard.Start, progress heartbeats,
//     CompleteTx writing chapters and lessons and the course's READY, or
//     settle's Finalize: a finalize record with the completion, parallel
//     metadata updates through handlers registered by name, and billing.
//   - NewSettler: the settler of the workers and of the two settle sweeps
//     the driver runs beside the reclaimers. A metadata store that refuses
//     a worker's write comes back for the sweep's; one in a hundred videos
//     meets a store that refuses for good, and its record is given up.
//   - RedisServer: a private redis-server on a free port, with an
//     append-only file, that the run stops and starts.
//   - Check: the invariants, each a query whose rows are violations, plus
//     the comparison of the markers (in Redis, or in the marker table)
//     with the reclaims in history.
//   - Recorder: every worker process, reclaimer, settle sweep and the
//     operator append what they do, as they do it, to the history table of
//     package history: an invoke before each operation, committed on its
//     own; its ok in the operation's own transaction (a start, a heartbeat
//     that wrote, a completion with its product rows, a fail, a retry, a
//     reclaim with its parent rule, a billing with its ledger row), so it
//     exists exactly when the operation committed; a refusal, with its
//     typed reason, or a failure right after the call returns; each
//     sweep's report. The driver records a crashed event for each worker
//     it kills. A worker's own history statements commit without waiting
//     for the WAL flush (synchronous_commit off): committed and visible at
//     once, so no kill of the worker loses one; only a crash of the server
//     could, which the run never causes. Package history's checker then judges that history and the
//     final state as data, sharing no code with the guards; the run fails
//     on what either judge finds, and its summary gives the history's
//     figures (events, outcomes by kind, operations by kind, violations).
//
// What it does not show: timing is not replayed. A seed replays every
// job's plan and the driver's random choices, but which transaction a kill
// or a termination lands in depends on the scheduler. Before the checks the
// run settles: the sweeps finish every finalize record a killed worker or a
// failed update left, so that every completed video is billed exactly once,
// or its record visibly given up.
//
// Run it longer with JOBGUARD_CHAOS_SOAK=4m, replay with
// JOBGUARD_CHAOS_SEED=<seed>:
//
//	JOBGUARD_CHAOS_SOAK=4m go test ./internal/testkit/chaos/ -run TestChaos -v -timeout 15m
package chaos
