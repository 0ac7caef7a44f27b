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
}

// Ledger records accruals in one table, at most one per (job, meter). A job
// is named by its jobs table (jobguard.Guard.TableKey) and its canonical id,
// so the jobs of any number of jobs tables share one ledger. Build it with
// NewLedger; it is safe for concurrent use.
type Ledger struct {
	now    func() time.Time
	met    *ledgerMetrics
	insert string // $1 job_id, $2 meter, $3 generation, $4 account, $5 quantity, $6 attributes, $7 recorded_at, $8 jobs_table
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
	return &Ledger{
		now: cfg.Now,
		met: newLedgerMetrics(cfg.MeterProvider),
		insert: `INSERT INTO ` + tbl + ` (jobs_table, job_id, meter, generation, account, quantity, attributes, recorded_at)` +
			` VALUES ($8, $1, $2, $3, $4, $5, $6::jsonb, $7) ON CONFLICT (jobs_table, job_id, meter) DO NOTHING`,
		insertFrom: func(source string, first int) string {
			p := func(i int) string { return fmt.Sprintf("$%d", first+i) }
			return `INSERT INTO ` + tbl + ` (jobs_table, job_id, meter, generation, account, quantity, attributes, recorded_at)` +
				` SELECT ` + p(0) + `::text, ` + p(1) + `::text, e.meter, ` + p(2) + `::int8, e.account, e.quantity, e.attributes, ` + p(3) + `::timestamptz` +
				` FROM ` + source + ` ON CONFLICT (jobs_table, job_id, meter) DO NOTHING RETURNING meter`
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
