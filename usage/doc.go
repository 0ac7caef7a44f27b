// Package usage bills a job's usage at most once, and only for a confirmed
// finalize; with package settle, exactly once.
//
// What it guarantees:
//
//   - Accrue refuses with ErrNotConfirmed, and sends nothing to the
//     database, unless the jobguard.Finalized it is given is confirmed: the
//     completion committed and every metadata update succeeded. A
//     Finalized cannot be built outside package jobguard, so a rejected
//     completion (a reclaimed job, a superseded generation) can never bill.
//   - The ledger holds at most one row per (job, meter), and the caller's
//     increment runs in the same transaction only when that row is new. A
//     replayed message, a retried finalize or concurrent calls accrue once;
//     the others get Accrued false and the earlier entry.
//   - A job is one job however its id was spelled, and one job of one
//     table: the row is keyed by the jobs table (jobguard.Guard.TableKey,
//     which Finalized.TableKey carries) and the job's canonical id (the
//     Finalized of Finalize and Resume names it so, whatever spelling they
//     were given). An upper-case uuid and its lower-case form are one row;
//     job 42 of two integer-id jobs tables are two, so any number of jobs
//     tables share one ledger, and an Accrue after settle billed the job
//     finds settle's row.
//   - Each ledger row records account, meter, quantity, the execution's
//     generation, optional JSON attributes and the time, so usage can be
//     audited from the ledger alone. An entry the ledger cannot store
//     (U+0000 or bytes that are not UTF-8 in Account or Meter; U+0000, half
//     a surrogate pair or a number beyond numeric's range in Attributes)
//     is refused before anything is sent, with an error wrapping
//     jobguard.ErrUnstorable; inside your transaction, it is left usable.
//     Attributes read back (an earlier accrual's Entry) keep every number
//     exactly, as a json.Number.
//   - Inside your transaction: given a pgx.Tx, Accrue's ledger row and
//     increment join it, as a savepoint, and commit or roll back with it,
//     together; AccrueTx writes them straight into it, without a
//     savepoint, for a caller that rolls back whole on any error. A
//     Finalized is Confirmed only once its completion committed (Finalize
//     refuses a transaction), so usage is never billed for a completion
//     that has not committed. A connection with a transaction open that is
//     not passed as its pgx.Tx is refused with jobguard.ErrInTransaction.
//
// What it does not do:
//
//   - It never bills a finalize that is not confirmed. Its completion is
//     written, so finalizing again is rejected and cannot confirm; only
//     jobguard.Guard.Resume, which re-runs the updates of a completion that
//     committed, can confirm it later (package settle does, from its
//     sweep). The gate is strict on purpose.
//   - On its own it bills at most once, not at least once: a process that
//     dies between a confirmed Finalize and Accrue, or whose metadata
//     update failed, leaves a COMPLETED job that is never billed, since a
//     Finalized lives only in the process that finalized and finalizing
//     again is rejected. Package settle closes that: its Finalize writes a
//     record of the usage in the completion's transaction, and its sweep
//     resumes the finalize (jobguard.Guard.Resume) and bills it through
//     this ledger, exactly once, or gives it up visibly. Use it when
//     billing is money; Accrue alone when a lost bill is acceptable.
//   - Idempotency is per (job, meter), not per execution: a job that is
//     retried and confirmed again still accrues once per meter.
//   - Increments on other databases or services are not in the transaction;
//     only what increment writes through its pgx.Tx is.
//
// Counters: most increments add the quantity to a running total per
// account. Named in Config.Counters, by meter, that total is written by
// the ledger row's own statement (a data-modifying common table
// expression), so Accrue with no increment is one statement and one round
// trip, atomic by itself: the row and the total commit together or not at
// all, and a duplicate adds nothing. Package settle runs the same upsert
// in its billing transaction, and needs no Increment for a counted meter.
//
//	ledger, err := usage.NewLedger(usage.Config{Counters: map[string]usage.Counter{
//		"video_seconds": {Table: "accounts", Key: "id", Column: "video_seconds"},
//	}})
//	...
//	_, err = ledger.Accrue(ctx, pool, fin, usage.Entry{
//		Account: accountID, Meter: "video_seconds", Quantity: seconds,
//	}, nil)
//
// The ledger table comes from Migration (usage_ledger); NewLedger points a
// Ledger at a table of another name or schema with the same columns. The
// package-level Accrue uses the default table through search_path. The
// second migration file keys the rows written before it by the table named
// jobs (or by the setting jobguard.jobs_table); it says how.
//
//	fin, err := guard.Finalize(ctx, pool, exec, spec)
//	if err != nil {
//		return err // not confirmed: no usage
//	}
//	_, err = usage.Accrue(ctx, pool, fin, usage.Entry{
//		Account: accountID, Meter: "video_seconds", Quantity: seconds,
//	}, func(ctx context.Context, tx pgx.Tx) error {
//		_, err := tx.Exec(ctx, `UPDATE accounts SET video_seconds = video_seconds + $1 WHERE id = $2`, seconds, accountID)
//		return err
//	})
package usage
