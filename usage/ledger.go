package usage

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/ledgerlink"
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
	// runs a ledger's counters in the statement that confirms its record.
	// Defaults to none.
	Counters map[string]Counter
}

// A Counter is where a meter's running totals live: a table with one row
// per account, whose Column is added the quantity of each new ledger row
// of the meter, as this statement would add it:
//
//	INSERT INTO Schema.Table AS c (Key, Column) VALUES (account, quantity)
//	ON CONFLICT (Key) DO UPDATE SET Column = c.Column + excluded.Column
//
// An account's first accrual inserts its row, so the table's other
// columns need defaults. Key needs a unique index of its own, on it alone
// and whole (its primary key will do: what ON CONFLICT (Key) infers), and
// takes the account converted to its type (text, uuid, bigint, a domain;
// a length it cannot hold is refused, never cut); Column is a number
// column. Through Accrue, a table, a key or a column the statement cannot
// use fails the accrual with the database's error, and the ledger row, in
// the same statement, is not written: a later call, once the counter is
// fixed, bills it. Package settle checks its ledger's counters when it is
// built (settle.New) and refuses one it could not use; it reads the key's
// type then, so a counter table changed later needs a new Settler. Name a
// table the same way in every counter that uses it, with one Key.
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

// upsert is the statement that adds vals to the columns cols of the row of
// tbl whose key is the value of keyExpr, for each row of from, inserting
// the rows that are missing. The names are quoted already.
func upsert(tbl, key string, cols []string, keyExpr string, vals []string, from string) string {
	var set []string
	for _, col := range cols {
		set = append(set, col+` = c.`+col+` + excluded.`+col)
	}
	return `INSERT INTO ` + tbl + ` AS c (` + key + `, ` + strings.Join(cols, `, `) + `) SELECT ` + keyExpr + `, ` + strings.Join(vals, `, `) +
		` FROM ` + from + ` ON CONFLICT (` + key + `) DO UPDATE SET ` + strings.Join(set, `, `)
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
	// counters are Config.Counters, for package settle's statement.
	counters map[string]Counter
	// insertFrom is insert for the entries of a source (ledgerlink.Ledger.Insert).
	insertFrom func(source string, first int) string
	read       string // $1 job_id, $2 meter, $3 jobs_table → generation, account, quantity, attributes, recorded_at
}

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
	keyed := map[string]string{} // table → the first meter counted in it
	for _, meter := range slices.Sorted(maps.Keys(cfg.Counters)) {
		c := cfg.Counters[meter]
		if err := CheckMeter(meter); err != nil {
			return nil, fmt.Errorf("usage: new ledger: Counters[%q]: %w", meter, err)
		}
		ctbl, key, col, err := c.names()
		if err != nil {
			return nil, fmt.Errorf("usage: new ledger: Counters[%q]: %w", meter, err)
		}
		// One statement may add to several meters' totals in one row: a
		// table's counters share its key, so that they are one upsert.
		if first, ok := keyed[ctbl]; !ok {
			keyed[ctbl] = meter
		} else if other := cfg.Counters[first]; other.Key != c.Key {
			return nil, fmt.Errorf("usage: new ledger: Counters[%q] and Counters[%q]: table %s is keyed by %q and by %q; a table's counters share one key",
				first, meter, ctbl, other.Key, c.Key)
		}
		// The statement's rows are the ledger insert's: one when the row
		// is new, none when it is a duplicate. Not the upsert's rows
		// affected, which a trigger that skips an update changing nothing
		// (suppress_redundant_updates_trigger, a quantity of 0) would make
		// none for a new row.
		counted[meter] = `WITH l AS (` + insert + ` RETURNING quantity), c AS (` +
			upsert(ctbl, key, []string{col}, `$9`, []string{`l.quantity`}, `l`) + `) SELECT FROM l`
	}
	return &Ledger{
		now:      cfg.Now,
		met:      newLedgerMetrics(cfg.MeterProvider),
		insert:   insert,
		counted:  counted,
		counters: maps.Clone(cfg.Counters), // the ledger counts what it was built with
		insertFrom: func(source string, first int) string {
			p := func(i int) string { return fmt.Sprintf("$%d", first+i) }
			return `INSERT INTO ` + tbl + ` (jobs_table, job_id, meter, generation, account, quantity, attributes, recorded_at)` +
				` SELECT ` + p(0) + `::text, ` + p(1) + `::text, e.meter, ` + p(2) + `::int8, e.account, e.quantity, e.attributes, ` + p(3) + `::timestamptz` +
				` FROM ` + source + ` ON CONFLICT (jobs_table, job_id, meter) DO NOTHING RETURNING meter, account, quantity`
		},
		read: `SELECT generation, account, quantity, attributes::text, recorded_at FROM ` + tbl +
			` WHERE jobs_table = $3 AND job_id = $1 AND meter = $2`,
	}, nil
}

// countFrom is the counters' part of a statement whose data-modifying
// common table expression named billed returns the new ledger rows
// (meter, account, quantity): one more expression per counter table, that
// adds each new row of a counted meter to its account's total. resolved
// names, for each counted meter, its table as the database knows it and
// its key column's type (ledgerlink.Resolved). A table's counters are one
// upsert, each account's row written once, since a statement cannot change
// a row twice: the table is the one resolved, however its counters spell
// it, and the account is converted to the key's type before it is grouped,
// so two spellings of one key are one row. It is empty without counters;
// its text is the same every time.
func (l *Ledger) countFrom(billed string, resolved map[string]ledgerlink.Resolved) (string, error) {
	type table struct {
		name, key, rawKey, keyType string
		first                      string              // the first meter counted in it, for errors
		cols                       map[string][]string // column → the meters added to it
	}
	tables := map[uint32]*table{}
	for _, meter := range slices.Sorted(maps.Keys(l.counters)) {
		c := l.counters[meter]
		tbl, key, col, _ := c.names() // checked by NewLedger
		r, ok := resolved[meter]
		if !ok {
			return "", fmt.Errorf("Counters[%q]: table %s not resolved", meter, tbl)
		}
		t := tables[r.Table]
		switch {
		case t == nil:
			t = &table{name: tbl, key: key, rawKey: c.Key, keyType: r.KeyType, first: meter, cols: map[string][]string{}}
			tables[r.Table] = t
		case t.rawKey != c.Key:
			return "", fmt.Errorf("Counters[%q] and Counters[%q]: tables %s and %s are one table, keyed by %q and by %q; a table's counters share one key",
				t.first, meter, t.name, tbl, t.rawKey, c.Key)
		}
		t.cols[col] = append(t.cols[col], ident.Literal(meter))
	}
	var b strings.Builder
	for i, oid := range slices.Sorted(maps.Keys(tables)) {
		t := tables[oid]
		cols := slices.Sorted(maps.Keys(t.cols))
		var vals, all []string
		for _, col := range cols {
			meters := t.cols[col] // sorted: the meters were taken in order
			vals = append(vals, `coalesce(sum(b.quantity) FILTER (WHERE b.meter IN (`+strings.Join(meters, `, `)+`)), 0)`)
			all = append(all, meters...)
		}
		slices.Sort(all)
		// The key's type is format_type's, which quotes what needs it.
		from := billed + ` AS b CROSS JOIN LATERAL (SELECT b.account::` + t.keyType + `) AS k(v) WHERE b.meter IN (` +
			strings.Join(all, `, `) + `) GROUP BY k.v`
		fmt.Fprintf(&b, `, counted%d AS (%s)`, i, upsert(t.name, t.key, cols, `k.v`, vals, from))
	}
	return b.String(), nil
}

// defaultLedger is the bundled migration's table, used by Accrue.
var defaultLedger = func() *Ledger {
	l, err := NewLedger(Config{})
	if err != nil {
		panic(err) // the default configuration is fixed at build time
	}
	return l
}()
