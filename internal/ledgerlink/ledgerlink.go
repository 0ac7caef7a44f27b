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
	// NOTHING) and returns the meter, the account and the quantity of
	// each row it inserts. Its parameters, numbered from first: the jobs
	// table, the job id, the generation, the time recorded.
	Insert func(source string, first int) string
	// Counters are the meters the ledger counts (usage.Config.Counters),
	// each with its counter's table (quoted) and its key and column (as
	// configured): a counted meter's rows are totalled by Count's
	// expressions, and need no increment.
	Counters map[string]Counter
	// Count is the counters' part of the statement in which Insert is the
	// data-modifying common table expression named billed: more
	// expressions (", name AS (...)"), to follow billed's, that add each
	// new row of a counted meter to its account's total. resolved holds,
	// for each meter of Counters, what the database says of its table.
	// Empty without counters; an error when two counters of one table
	// disagree on its key.
	Count func(billed string, resolved map[string]Resolved) (string, error)
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
}

// Counter is one counted meter's counter, as configured.
type Counter struct {
	// Table is the table's name, quoted (and its schema, when one is
	// configured): what to_regclass resolves.
	Table string
	// Key and Column are the column names, as configured.
	Key, Column string
}

// Resolved is what the database says of a counter's table: its oid, which
// tells two spellings of one table apart from two tables, and the key
// column's type as format_type prints it.
type Resolved struct {
	Table   uint32
	KeyType string
}

// Of returns ledger's (a *usage.Ledger) side of a billing. Package usage
// sets it in an init.
var Of func(ledger any) Ledger
