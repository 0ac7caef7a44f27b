package reclaim

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/sqlfile"
	"github.com/jobguard/jobguard/jobguard"
)

// LimitsTableDefault is the table TableLimits reads, created by Migration.
const LimitsTableDefault = "job_type_limits"

//go:embed migrations/*.sql
var embedded embed.FS

// MigrationFiles holds the SQL files that create the default limits table
// (job_type text, max_runtime interval), named in the order they apply.
// Each can be run more than once, so any migration tool can take them.
//
// Migration is the SQL of every file in MigrationFiles, in order, as one string.
var MigrationFiles, Migration = sqlfile.Load(embedded, "migrations")

// Limits gives the maximum runtime of each job type. Sweep asks for them at
// the start of every pass, so an operator's change takes effect at the next
// sweep. A type absent from the map has no limit: its jobs are skipped with
// a warning, never reclaimed. An error, or a panic, fails the sweep.
type Limits interface {
	Limits(ctx context.Context) (map[string]time.Duration, error)
}

// StaticLimits is a fixed map of job type to maximum runtime.
type StaticLimits map[string]time.Duration

// Limits returns the map itself.
func (l StaticLimits) Limits(context.Context) (map[string]time.Duration, error) { return l, nil }

// TableLimits reads the limits from a table with the columns of Migration:
// job_type (text) and max_runtime (interval), one query per sweep. Create it
// with NewTableLimits.
type TableLimits struct {
	db     jobguard.DB
	sql    string
	upsert string
}

// TableLimitsConfig says where TableLimits reads.
type TableLimitsConfig struct {
	// DB is where the table lives. Required.
	DB jobguard.DB
	// Schema holds the table. Defaults to "", which resolves it through the
	// connection's search_path.
	Schema string
	// Table is the table's name. Defaults to LimitsTableDefault.
	Table string
}

// NewTableLimits checks cfg and builds the query once.
func NewTableLimits(cfg TableLimitsConfig) (*TableLimits, error) {
	if cfg.DB == nil {
		return nil, errors.New("reclaim: table limits: DB is nil")
	}
	if cfg.Table == "" {
		cfg.Table = LimitsTableDefault
	}
	name, err := ident.QuoteTable(cfg.Schema, cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("reclaim: table limits: %w", err)
	}
	// Microseconds, the interval's own precision, so no float is involved.
	return &TableLimits{db: cfg.DB,
		sql: `SELECT job_type::text, (extract(epoch FROM max_runtime) * 1000000)::int8 FROM ` + name,
		upsert: `INSERT INTO ` + name + ` (job_type, max_runtime) VALUES ($1, $2::int8 * interval '1 microsecond')` +
			` ON CONFLICT (job_type) DO UPDATE SET max_runtime = EXCLUDED.max_runtime`,
	}, nil
}

// Set stores jobType's limit, replacing the one it had; the next sweep
// uses it. It is the explicit step that applies a Suggestion.
func (l *TableLimits) Set(ctx context.Context, jobType string, limit time.Duration) error {
	if limit < time.Microsecond {
		return fmt.Errorf("reclaim: set limit of %q: %v is not positive", jobType, limit)
	}
	if _, err := l.db.Exec(ctx, l.upsert, jobType, limit.Microseconds()); err != nil {
		return fmt.Errorf("reclaim: set limit of %q: %w", jobType, err)
	}
	return nil
}

// Limits reads the whole table.
func (l *TableLimits) Limits(ctx context.Context) (map[string]time.Duration, error) {
	rows, err := l.db.Query(ctx, l.sql)
	if err != nil {
		return nil, fmt.Errorf("reclaim: limits: %w", err)
	}
	out := map[string]time.Duration{}
	var typ string
	var us int64
	_, err = pgx.ForEachRow(rows, []any{&typ, &us}, func() error {
		out[typ] = time.Duration(us) * time.Microsecond
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reclaim: limits: %w", err)
	}
	return out, nil
}
