// Package usage bills a job's usage exactly once, and only for a confirmed
// finalize.
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
//   - Each ledger row records account, meter, quantity, the execution's
//     generation, optional JSON attributes and the time, so usage can be
//     audited from the ledger alone.
//   - Inside your transaction: given a pgx.Tx, Accrue's ledger row and
//     increment join it and commit or roll back with it, together. A
//     Finalized is Confirmed only once its completion committed (Finalize
//     refuses a transaction), so usage is never billed for a completion
//     that has not committed. A connection with a transaction open that is
//     not passed as its pgx.Tx is refused with jobguard.ErrInTransaction.
//
// What it does not do:
//
//   - It never bills a finalize that is not confirmed, not even later: its
//     completion is written, so finalizing again is rejected and cannot
//     confirm. Repair the failed metadata and, if the usage must be billed,
//     do it as a deliberate operator action. The gate is strict on purpose.
//   - It bills at most once, not at least once: a process that dies between
//     a confirmed Finalize and Accrue loses the accrual, since a Finalized
//     lives only in the process that finalized and finalizing again is
//     rejected. Call Accrue right after Finalize; reconcile from the jobs
//     table (COMPLETED jobs with no ledger row) if that window matters.
//   - Idempotency is per (job, meter), not per execution: a job that is
//     retried and confirmed again still accrues once per meter.
//   - Increments on other databases or services are not in the transaction;
//     only what increment writes through its pgx.Tx is.
//
// The ledger table comes from Migration (usage_ledger); NewLedger points a
// Ledger at a table of another name or schema with the same columns. The
// package-level Accrue uses the default table through search_path.
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
