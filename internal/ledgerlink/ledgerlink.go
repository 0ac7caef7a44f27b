// Package ledgerlink hands package settle the ledger insert that package
// usage builds, so that settle's billing confirms its record and inserts
// the ledger rows in one statement, without putting either in usage's API.
//
// Package usage sets Of in an init; package settle calls it. Neither
// imports the other through this package, so the link has no cycle, and
// no caller outside the module can reach it.
package ledgerlink

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/jobguard"
)

// Ledger is one usage ledger's side of a billing that inserts its rows
// from a statement of the biller's.
type Ledger struct {
	// Insert is the ledger insert of one job's entries, read from source:
	// a FROM list in which e names each entry, with the columns meter
	// (text), account (text), quantity (int8) and attributes (jsonb). It
	// skips an entry whose (job, meter) has a row already (ON CONFLICT DO
	// NOTHING) and returns the meter and the quantity of each row it
	// inserts. Its
	// parameters, numbered from first: the jobs table, the job id, the
	// generation, the time recorded.
	Insert func(source string, first int) string
	// Counted reports whether the ledger counts meter (usage.Config.Counters).
	Counted func(meter string) bool
	// Count adds each entry's quantity (usage.Entry values of counted
	// meters, each a new ledger row) to its account's total, in tx, with
	// the upsert that Accrue's statement makes, in one order whatever the
	// order given (counter table, then account), so that concurrent
	// billings do not deadlock on the rows they share. When it returns an
	// error, roll tx back.
	Count func(ctx context.Context, tx pgx.Tx, entries []any) error
	// Table is the counter table of a counted meter, quoted: Count's
	// order, and how a billing tells which meters share a table.
	Table func(meter string) string
	// CountFrom is Count's upsert of a counted meter's total for the rows
	// (account, quantity) of rows, a SELECT, returning one row per row
	// it adds to: for a statement of the biller's that counts its new
	// ledger rows itself. The account is best a parameter, so that the
	// server types it by the counter's key column, as Count's does.
	CountFrom func(meter, rows string) string
	// Now is the ledger's clock, for the time recorded.
	Now func() time.Time
	// Accrued judges one entry, a usage.Entry, once Insert has run in tx
	// at the time at: inserted says whether its row is new. It checks the
	// entry as AccrueTx does, runs increment only for a new row, reads the
	// earlier accrual of a duplicate, counts either as AccrueTx counts
	// them, and returns the entry's usage.Accrual. When it returns an
	// error, roll tx back.
	Accrued func(ctx context.Context, tx pgx.Tx, fin jobguard.Finalized, entry any, inserted bool, at time.Time,
		increment func(ctx context.Context, tx pgx.Tx) error) (any, error)
	// Judged is Accrued for an entry without an increment, whose row the
	// biller's statement inserted (inserted) or found (a duplicate, whose
	// earlier accrual is read through db) and has committed. It does not
	// check the entry again: a refusal after the commit would bill all the
	// same, so the biller checks before (as settle does when it stores
	// the record).
	Judged func(ctx context.Context, db jobguard.DB, fin jobguard.Finalized, entry any, inserted bool, at time.Time) (any, error)
}

// Of returns ledger's (a *usage.Ledger) side of a billing. Package usage
// sets it in an init.
var Of func(ledger any) Ledger
