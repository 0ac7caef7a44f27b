package usage

import (
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/internal/ident"
)

// LedgerTableDefault is the ledger table of the bundled migration.
const LedgerTableDefault = "usage_ledger"

// Config says where a Ledger keeps its rows. The table needs the columns and
// the (jobs_table, job_id, meter) primary key of the bundled migration
// (every file of MigrationFiles).
type Config struct {
	// Schema holds the ledger table. Defaults to "", which resolves the table
	// through the connection's search_path.
	Schema string
	// Table is the ledger table's name. Defaults to LedgerTableDefault.
	Table string
	// Now stamps recorded_at. Defaults to time.Now.
	Now func() time.Time
	// MeterProvider receives jobguard.usage.accruals, counted by result
	// (accrued, duplicate, not_confirmed). The package-level Accrue records
	// none. Defaults to nil: no metrics, at no cost.
	MeterProvider metric.MeterProvider
	// Counters keep a running total per account, by meter: a new ledger
	// row of a meter named here adds its Quantity to its account's total
	// in the statement that inserts the row, so that the row and the total
	// commit together or not at all, and a duplicate adds nothing. Accrue
	// with a counter and no increment is that one statement; an increment
	// given as well runs after it, in the same transaction. Package settle
	// adds a counted meter's total in its billing transaction, with the
	// same upsert. Defaults to none.
	Counters map[string]Counter
}

// A Counter is where a meter's running totals live: a table with one row
// per account, whose Column is added the quantity of each new ledger row
// of the meter, as this statement would add it:
//
//	INSERT INTO Schema.Table AS c (Key, Column) VALUES (account, quantity)
//	ON CONFLICT (Key) DO UPDATE SET Column = coalesce(c.Column, 0) + excluded.Column
//
// An account's first accrual inserts its row, so the table's other columns
// need defaults; a total that is NULL counts from zero. Key needs a unique
// index of its own, on it alone and whole (its primary key will do: what
// ON CONFLICT (Key) infers), and takes the account converted to its type
// (text, uuid, bigint, a domain; a length it cannot hold is refused, never
// cut); Column is a number column. A table, a key or a column the
// statement cannot use fails the accrual with the database's error, and
// the ledger row, written in the same statement (Accrue) or the same
// transaction (settle's billing), is not written: a later call, once the
// counter is fixed, bills it; settle retries the record, and gives it up
// visibly after its attempts, as it does a failing increment. A counter
// fails only the accruals of its own meter (in settle, the billing of each
// record that bills it, whole).
type Counter struct {
	// Schema holds Table. Defaults to "", which resolves the table
	// through the connection's search_path.
	Schema string
	// Table holds the totals, one row per account. Required.
	Table string
	// Key is the column that holds the account. Required.
	Key string
	// Column is the running total. Required.
	Column string
}

// names returns c's table, key and column, checked and quoted.
func (c Counter) names() (tbl, key, col string, err error) {
	if tbl, err = ident.QuoteTable(c.Schema, c.Table); err != nil {
		return "", "", "", err
	}
	if err := ident.Check("Key", c.Key); err != nil {
		return "", "", "", err
	}
	if err := ident.Check("Column", c.Column); err != nil {
		return "", "", "", err
	}
	return tbl, ident.Quote(c.Key), ident.Quote(c.Column), nil
}

// upsert is the statement that adds the quantity to the total in column
// col of the row of tbl whose key is the account, inserting the row when
// it is missing, for the row (account, quantity) of rows. A NULL total
// counts from zero. The names are quoted already.
func upsert(tbl, key, col, rows string) string {
	return `INSERT INTO ` + tbl + ` AS c (` + key + `, ` + col + `) ` + rows +
		` ON CONFLICT (` + key + `) DO UPDATE SET ` + col + ` = coalesce(c.` + col + `, 0) + excluded.` + col
}

// Ledger records accruals in one table, at most one per (job, meter). A job
// is named by its jobs table (jobguard.Guard.TableKey) and its canonical id,
// so the jobs of any number of jobs tables share one ledger. Build it with
// NewLedger; it is safe for concurrent use.
type Ledger struct {
	now    func() time.Time
	met    *ledgerMetrics
	insert string // $1 job_id, $2 meter, $3 generation, $4 account, $5 quantity, $6 attributes, $7 recorded_at, $8 jobs_table
	// counted is insert for each meter with a counter, by meter: the row
	// and the total in one statement, with $9 the account as the
	// counter's key (a parameter, so that its type is the key column's).
	counted map[string]string
	// totals is each counted meter's upsert of one account's total, by
	// meter: $1 the account, $2 the quantity, each a parameter typed by
	// its column. Package settle runs it for each new ledger row of the
	// meter.
	totals map[string]string
	// counters is each counted meter's counter, its names quoted; the
	// table's is the order in which billings take the counters' rows.
	counters map[string]counterNames
	// insertFrom is insert for the entries of a source (ledgerlink.Ledger.Insert).
	insertFrom func(source string, first int) string
	read       string // $1 job_id, $2 meter, $3 jobs_table → generation, account, quantity, attributes, recorded_at
}

// counterNames are a counter's table, key and column, quoted.
type counterNames struct{ tbl, key, col string }

// NewLedger validates cfg and builds the ledger's statements once.
func NewLedger(cfg Config) (*Ledger, error) {
	if cfg.Table == "" {
		cfg.Table = LedgerTableDefault
	}
	tbl, err := ident.QuoteTable(cfg.Schema, cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("usage: new ledger: %w", err)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	insert := `INSERT INTO ` + tbl + ` (jobs_table, job_id, meter, generation, account, quantity, attributes, recorded_at)` +
		` VALUES ($8, $1, $2, $3, $4, $5, $6::jsonb, $7) ON CONFLICT (jobs_table, job_id, meter) DO NOTHING`
	counted := make(map[string]string, len(cfg.Counters))
	totals := make(map[string]string, len(cfg.Counters))
	counters := make(map[string]counterNames, len(cfg.Counters))
	for meter, c := range cfg.Counters {
		if err := CheckMeter(meter); err != nil {
			return nil, fmt.Errorf("usage: new ledger: Counters[%q]: %w", meter, err)
		}
		ctbl, key, col, err := c.names()
		if err != nil {
			return nil, fmt.Errorf("usage: new ledger: Counters[%q]: %w", meter, err)
		}
		// The statement's rows are the ledger insert's: one when the row
		// is new, none when it is a duplicate. Not the upsert's rows
		// affected, which a trigger that skips an update changing nothing
		// (suppress_redundant_updates_trigger, a quantity of 0) would make
		// none for a new row. The account is a parameter of its own, so
		// that the server types it by the key column, as it does totals'.
		counted[meter] = `WITH l AS (` + insert + ` RETURNING quantity), c AS (` +
			upsert(ctbl, key, col, `SELECT $9, l.quantity FROM l`) + `) SELECT FROM l`
		totals[meter] = upsert(ctbl, key, col, `VALUES ($1, $2)`)
		counters[meter] = counterNames{tbl: ctbl, key: key, col: col}
	}
	return &Ledger{
		now:      cfg.Now,
		met:      newLedgerMetrics(cfg.MeterProvider),
		insert:   insert,
		counted:  counted,
		totals:   totals,
		counters: counters,
		insertFrom: func(source string, first int) string {
			p := func(i int) string { return fmt.Sprintf("$%d", first+i) }
			return `INSERT INTO ` + tbl + ` (jobs_table, job_id, meter, generation, account, quantity, attributes, recorded_at)` +
				` SELECT ` + p(0) + `::text, ` + p(1) + `::text, e.meter, ` + p(2) + `::int8, e.account, e.quantity, e.attributes, ` + p(3) + `::timestamptz` +
				` FROM ` + source + ` ON CONFLICT (jobs_table, job_id, meter) DO NOTHING RETURNING meter, quantity`
		},
		read: `SELECT generation, account, quantity, attributes::text, recorded_at FROM ` + tbl +
			` WHERE jobs_table = $3 AND job_id = $1 AND meter = $2`,
	}, nil
}

// defaultLedger is the bundled migration's table, used by Accrue.
var defaultLedger = func() *Ledger {
	l, err := NewLedger(Config{})
	if err != nil {
		panic(err) // the default configuration is fixed at build time
	}
	return l
}()
