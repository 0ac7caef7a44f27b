// Package model is a model-based test of the whole job lifecycle: the test
// that thinks of cases for us.
//
// TestModel draws random sequences of operations, runs each against the
// real PostgreSQL and Redis through the public API only (jobguard,
// heartbeat, reclaim, settle, usage, compensate, watch), and after every
// step compares what
// the servers hold with a reference model written in plain Go that shares
// no code with the guards. pgregory.net/rapid draws the sequences (a state
// machine: rapid.Check with T.Repeat over an action map), shrinks a failing
// one to a minimal sequence and prints the seed that replays it.
//
// # What it covers
//
// Every table shape of package fixture (uuid, text and integer ids; an
// enum status and Prisma's names; a table without a generation column),
// and fixture.Int4Nullable: an int4 id whose ids count down from
// 2147483647, and a parent, progress, start and failure reason that are
// nullable, with rows holding NULL in them (jobs without a parent; a copy
// of the table whose generation or type column admits NULL must be
// refused by New). The shapes run in both pgx query modes and in session time zones east and west of UTC,
// one schema per shape for the whole run, emptied between sequences, with
// fresh job ids per sequence. Each shape also gets a twin jobs table of the
// same shape in the same schema, sharing the side tables, holding jobs of
// the same ids.
//
// The shapes with a generation column get an owner column where they have
// none, mapped as the table's OwnerColumn, beside the workers table of
// package lease.
//
// The operations:
//
//   - a worker's: StartGuard.Start, under the process's lease
//     (StartGuardConfig.Owner) or under none; Heartbeat.Beat with evidence and without
//     (zero output, an empty poll, progress past 100%); CompleteTx writing
//     product rows and the parent READY, or failing its save; jobguard's
//     Finalize with 0..3 updates that succeed, fail or panic, then
//     usage.Accrue of 0..2 entries (zero, MaxInt64 and negative
//     quantities, a meter twice); settle's Finalize with 0..3 updates
//     through handlers that succeed, fail once, panic once, fail until
//     repaired or are not registered, and 0..2 usage entries; Fail with
//     empty, long, NUL-holding, non-ASCII and reclaimed-looking reasons;
//     every one of them inside a caller's transaction too (Finalize must
//     refuse it; CompleteTx commits or rolls back with it);
//   - an operator's: Retry, Cancel (of queued, running and finished jobs,
//     on the pool or inside a transaction of the operator's that commits
//     or rolls back), settle's Reopen, repairing a broken store, a
//     per-type limit from 1µs to LimitMax and beyond ('1000 years', and
//     'infinity' on PostgreSQL 17), or none;
//   - the services': a reclaim sweep, with the rescue of the running jobs
//     whose owner's lease is not live (reclaim.Config.Workers), over the
//     table itself or over a queue's listings (each job spelled some valid way, its start on the queue's
//     clock, stale listings of attempts a Retry or a restart replaced), with
//     parent rules, one of which fails or panics for poisoned jobs, and,
//     after a stall of every job, under a brake of one job of a type and
//     two in all, which must keep the jobs stalled longest; a settle
//     sweep; a settle Finalize of the twin table's job of the same id; a
//     compensate sweep; the watcher's periodic check;
//   - compensate: executions Record the files they are about to create, at
//     a path of their own or at the job's (which every execution of it
//     shares), and upload them at any time, also after they lost the job;
//     compensate's Finalize keeps them or, rejected, compensates them at
//     once; a sweeper on a clock of its own keeps, owes, compensates,
//     spares and rechecks; RecheckAfter passes on the database's side;
//   - watch: every started execution is watched under the spelling it was
//     started by, on the Postgres transport; a reclaim's notices cancel the
//     executions of its jobs at their generation or older (waited for with
//     a deadline), or are dropped (a reclaimer without a publisher), and
//     the check must catch what they missed;
//   - a settle attempt that parks in its handler (a sweep of a settler
//     whose handler blocks), its lease run out on the database's side, its
//     record claimed by other sweeps, given up and reopened meanwhile, and
//     then released: its verdict must stand only if nothing moved the
//     record since;
//   - leases: each worker process starts under a lease (TTL an hour, so
//     that only the model ends one); a lease expires on the database's
//     clock (the process does not know, and may still start jobs under it)
//     or is released (the process knows: Start refuses with ErrOwnerLost);
//     a crashed process starts again under a new lease while the old one
//     stays live until it ends, and its jobs must not be rescued before. A
//     dead worker's story runs as one action, each step checked: its lease
//     ends, a sweep rescues its job (QUEUED, a new generation, no owner,
//     Shared.RescuedReason), its old execution comes back and writes (a
//     heartbeat, CompleteTx, Finalize, settle's Finalize, Fail,
//     compensate's Finalize: all refused), and the job is started again;
//   - faults: a worker process crashing (its executions and heartbeat
//     slots gone), a process's clock moved (the heartbeats', the
//     reclaimer's Now), job rows and parents held by idle transactions for
//     the length of a sweep, the test's Redis keys deleted (a FLUSHDB of
//     its own prefix), Redis unreachable (a client of a closed port), a
//     parent rule that fails or panics;
//   - hostile input: every spelling of an id that its column reads as the
//     same value (fixture.Spellings: upper-case and braced uuids, "+0042",
//     " 42", leading zeros), ids the column cannot hold, forged executions
//     of an older generation, and text ids with spaces, braces and letters
//     beyond ASCII.
//
// Time never comes from the wall clock: "time passed" is an operation that
// moves a job's updated_at and start back on the database's side, and the
// model's ages and limits are far enough apart (20 minutes and more) that
// the milliseconds a step takes cannot change a decision. The heartbeats run
// on a clock of the model's own.
//
// After every step the check compares, for every job: its status,
// generation and failure reason; its product rows and its parent's status;
// its owner; its settle record (generation, state, attempts); its reclaim marker
// (present, generation); the ledger rows of both jobs tables and the
// increments they ran. It also checks, apart from the model: a generation
// never falls; no job goes from FAILED to COMPLETED or PROCESSING in one
// step (only Retry leaves FAILED, to QUEUED); no product row or READY parent
// for a job that is not COMPLETED; one increment per ledger row and no
// ledger row for a job that is not COMPLETED; the artifacts (state,
// whether a recheck is scheduled or due by the database's clock) and the
// files that exist; every watched context, cancelled exactly when the
// model says its execution lost the job, with the LostError the model
// expects (job, generation, how, what was seen, whether a cancel); every
// refusal is typed (ErrJobTerminal, ErrReclaimed, ErrCancelled,
// ErrNotCancellable, ErrOwnerLost (never permanent), ErrInvalidJobID, ErrNotRetryable,
// ErrNoEvidence, ErrPending, ErrNotConfirmed, ErrNotGivenUp,
// ErrUnregistered, ErrInTransaction, and IsPermanent where it must be); a
// sweep reclaims and rescues exactly the model's jobs and counts the held
// rows, failed parent rules, paused, shadowed and braked jobs and marker
// errors the model expects.
//
// # What it does not cover
//
// Concurrency: the model is sequential, so a reclaim that loses its race
// (its row changes between the read and the write) and contention between
// workers are left to the chaos run and the packages' own tests; the one
// attempt that outlives its lease is the parked one, released between
// steps; the races of a cancel with a save and of a rescue with an
// operator's Retry have tests of their own (jobguard, reclaim). Not
// driven: a lease's renewer and its own loss (ErrLost, ErrExpired: the
// lease package's tests), the brake's share caps and clock-jump check,
// compensate's CompensateExecution and Keep, failing
// compensators, Record inside a transaction; watch on Redis, its outages
// and Watcher.Lost; the reclaimer's leader election, Plan and shadow
// mode, BullMQ and River sources, Redis Cluster. Markers expiring after
// their TTL, and limits within
// milliseconds of a job's runtime, are out of reach by design: the model
// does not depend on timing.
//
// # Running it
//
// It runs inside the normal test command, bounded: JOBGUARD_MODEL_DURATION
// (default 15s) is the time given to drawing sequences, shared out between
// the table shapes, which run one after the other. A soak:
//
//	JOBGUARD_MODEL_DURATION=10m go test ./internal/testkit/model -run TestModel -v
//
// The last line says what the run did: sequences, steps, faults injected,
// invariants checked, failures, and what the reclaim sweeps did. Add
// -failfast to stop at the first shape that fails.
//
// # Replaying a failure
//
// A failure prints the minimal sequence (one "step:" line per operation,
// with every value drawn) and how to replay it:
//
//	go test ./internal/testkit/model -run 'TestModel/int-id/simple-protocol/Asia-Seoul' -rapid.seed=11440973313178434571
//	go test ./internal/testkit/model -run 'TestModel/int-id/simple-protocol/Asia-Seoul' -rapid.failfile=testdata/rapid/....fail
//
// The fail file (under testdata/rapid, ignored by git) holds the shrunk
// sequence itself and replays it exactly; the seed replays the search that
// found it. A run picks up the fail files of earlier failures first, so a
// fixed defect is retried before any new sequence; delete them once it
// passes. MODEL_DEBUG=1 prints every step with the model's view of the jobs
// as it runs. Keep a sequence worth keeping as a plain Go test that replays
// its steps.
package model
