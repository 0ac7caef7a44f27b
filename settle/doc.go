// Package settle makes a finalize's metadata updates and its billing
// survive any crash: every completed finalize is billed exactly once, with
// its metadata caught up, or is visibly given up.
//
// jobguard's Finalize and usage's Accrue bill at most once: the proof that a
// finalize was confirmed lives only in the process that finalized, so a
// worker killed between its completion and Accrue, or in the middle of its
// metadata updates, leaves a COMPLETED job that is never billed and whose
// video or asset rows never turn READY, and nothing knows. settle writes
// that proof down instead, in the completion's own transaction (an outbox),
// and a sweep finishes what a crash or a failure left.
//
// What it guarantees:
//
//   - A record per completed finalize. Settler.Finalize writes a record
//     (the execution, the named updates with their arguments, the usage
//     entries) in the transaction of the conditional completion, only when
//     that completion won. A rejected, stopped or rolled-back completion
//     leaves none; a committed one always has one. It is keyed by the
//     execution: its jobs table (jobguard.Guard.TableKey), the job id as the
//     id column prints it (whatever spelling Finalize was given), and the
//     generation. Any number of jobs tables may share the records table
//     and the ledger: job 42 of the tasks and job 42 of the exports are two
//     records and two bills, and each Settler sweeps, reopens and bills
//     only the records of its Guard's table.
//   - Updates are recorded as they succeed (the last one by the billing
//     that follows it at once), and billing happens once all have, in the
//     transaction that marks the record confirmed: the ledger row per (job,
//     meter), and each increment only for a new ledger row. "Confirmed"
//     and "billed" commit together, so they never disagree. When only the
//     ledger's counters bill the record (no increment among its meters),
//     that transaction is one statement: the confirmation, the ledger rows
//     and the totals.
//   - The in-process path is as before: a finalize whose updates succeed
//     bills at once. The sweep (Settler.Sweep, Settler.Run) catches up only
//     on records left pending by a crash or a failure: it re-runs their
//     pending updates through the handlers registered by name and bills
//     once they succeed. Each handler must be idempotent: it may run again
//     after a success that was not recorded. A spec with no updates (a job
//     that only bills), no usage, or neither is settled the same way.
//     Quantities of zero are billed like any other; negative ones are
//     refused before anything is written. So is a spec holding a value the
//     record cannot store, which would roll the completion back on every
//     try: U+0000 in Args, Attributes or an Account, and the other values
//     Update.Args lists. Finalize refuses it before anything runs, Recheck
//     included, with an error wrapping jobguard.ErrUnstorable that names
//     the field (jobguard.IsPermanent reports it); the job is left as it
//     was. A handler's error is recorded as text can hold it (U+0000 as
//     \x00, bytes that are not UTF-8 as U+FFFD).
//   - Attributes reach the ledger exactly: the record keeps their JSON,
//     and reads it back with every number as a json.Number (an integer
//     beyond 2^53 is not rounded through a float64).
//   - Exactly once. However many finalizes and sweeps, in however many
//     processes, race for a record, one transaction confirms it and bills
//     it; the others find it confirmed. The ledger's key (job, meter)
//     stands behind that.
//   - Nothing lost silently. A record whose attempts keep failing waits
//     BackoffMin, doubled per attempt up to BackoffMax, and after
//     MaxAttempts goes to given_up: counted (jobguard.settle.records with
//     result given_up), logged at warn with its job and error, never
//     billed. Reopen gives it another round once an operator has fixed the
//     cause. A record naming a handler or meter this process has not
//     registered fails its attempt with ErrUnregistered, visibly; it is
//     not skipped.
//   - A handler or an increment that panics fails its attempt as an
//     error would, and nothing else: the panic never reaches a sweep's
//     goroutines or the process. The record is retried after its backoff
//     (never at once) and given up after MaxAttempts like any failure; its
//     last_error says "panic: " and the value, and the sweep's summary
//     line, at warn, carries the first panic's value and stack. In the
//     worker, Finalize returns ErrPending joined with the cause, which
//     wraps a *jobguard.PanicError, and leaves the record pending for the
//     sweep. A handler that does not return a second after its
//     UpdateTimeout is abandoned the same way (jobguard.ErrAbandoned): the
//     sweep goes on without it. A panicking logger or meter does not stop
//     Run either.
//   - No transaction is held open across an update's work. The sweep takes
//     a record with one statement (FOR UPDATE SKIP LOCKED) that leases it
//     for UpdateTimeout + BackoffMin, runs the updates outside any
//     transaction, and bills in a short transaction of its own. Sweeps need
//     no leader.
//   - A verdict holds only for the claim that made it. Each claim of a
//     record takes the next claim number, which nothing lowers, and a
//     retry or a give-up is written only while the record still has the
//     number its attempt claimed. An attempt that outlived its lease
//     changes nothing (Report.Raced), however often the record was
//     claimed, handed back or reopened since. The count of attempts is no
//     fence: Reopen starts it over and a stopped attempt hands its attempt
//     back. So the records table has a trigger (claim_follows_attempts,
//     from MigrationFiles, with its function
//     job_settlements_claim_follows_attempts beside the table) that moves
//     the claim on whenever a statement changes the attempts and leaves
//     the claim as it is: a Reopen, a hand-back, and the claims and
//     hand-backs of a process built before the claim column, which count
//     attempts alone, during a rolling deploy. New refuses a records table
//     without it, or with it disabled. The other way round, such an older
//     process fences its own verdicts on the count alone, as it always
//     did: a later claim fences its stale attempt out, but a hand-back or
//     a Reopen that brings the count back to its number lets its verdict
//     through, until the deploy has replaced it.
//   - Inside your transaction: Finalize refuses a pgx.Tx, or a connection
//     with a transaction open, with jobguard.ErrInTransaction before
//     anything runs, as jobguard's Finalize does: the record must commit
//     with the completion, and nothing may run or bill before that commit.
//     The increments run inside settle's billing transaction (the pgx.Tx
//     they are given); the handlers run outside any transaction. Sweep,
//     Run and Reopen run on Config.DB, each write in a short transaction of
//     its own, never in a caller's.
//
// What it does not do:
//
//   - It does not make handlers idempotent, nor undo one that succeeded for
//     a record later given up. Writes a handler makes in other systems are
//     not in any transaction of settle's.
//   - It bills only what the record names. A finalize made with jobguard's
//     Finalize (no record) is billed, at most once, only by usage.Accrue.
//   - A record whose job row was deleted, or moved off COMPLETED by hand, is
//     given up at its first attempt: settle does not guess what the job
//     was.
//   - On a jobs table without a generation column the record's generation
//     is 0, and jobguard's status-only mode applies: a job completes once,
//     so its record is still unique.
//   - Schedules are on the database's clock (statement_timestamp()), so
//     every process agrees on when a record is due; there is no clock to
//     inject.
//
// Which to choose: jobguard.Finalize with usage.Accrue is enough when an
// occasional lost bill, or metadata left behind by a crash, is acceptable
// or reconciled by other means; its Finalized result, and Accrue's gate,
// keep their meaning. Choose settle when billing is money and metadata
// must always catch up: the cost is one more row written with the
// completion, one short write per update, and handlers registered by name
// in every process that finalizes or sweeps. The package doc of jobguard,
// "Three Finalizes, two Updates", sets this Finalize and its Update beside
// jobguard's and compensate's.
//
// Why a package of its own: records are a table with their own lifecycle
// and a background sweep, above both jobguard (the completion, and Resume,
// which the sweep uses to confirm a finalize whose completion committed
// earlier) and usage (the ledger). Nothing below imports it.
//
//	s, err := settle.New(ctx, settle.Config{
//		Guard: guard, DB: pool,
//		Handlers: map[string]settle.Handler{
//			"video": func(ctx context.Context, exec jobguard.Execution, args json.RawMessage) error {
//				var a struct{ VideoID string }
//				if err := json.Unmarshal(args, &a); err != nil {
//					return err
//				}
//				_, err := pool.Exec(ctx, `UPDATE videos SET status = 'READY' WHERE id = $1`, a.VideoID)
//				return err // idempotent: setting READY twice is READY
//			},
//		},
//		Increments: map[string]settle.Increment{
//			"video_seconds": func(ctx context.Context, tx pgx.Tx, _ jobguard.Execution, e usage.Entry) error {
//				_, err := tx.Exec(ctx, `UPDATE accounts SET video_seconds = video_seconds + $1 WHERE id = $2`, e.Quantity, e.Account)
//				return err
//			},
//		},
//	})
//	// in the worker, instead of guard.Finalize and usage.Accrue:
//	res, err := s.Finalize(ctx, pool, exec, settle.Spec{
//		Updates: []settle.Update{{Name: "video", Args: map[string]string{"VideoID": videoID}}},
//		Usage:   []usage.Entry{{Account: account, Meter: "video_seconds", Quantity: seconds}},
//	})
//	if errors.Is(err, settle.ErrPending) {
//		err = nil // completed; the sweep finishes the rest
//	}
//	// beside the reclaimer:
//	go s.Run(ctx)
//
// The records table comes from Migration (job_settlements); the ledger from
// usage.Migration. Their second files key existing rows by the table named
// jobs (or by the setting jobguard.jobs_table); they say how.
package settle
