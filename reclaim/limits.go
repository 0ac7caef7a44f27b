package reclaim

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/interval"
	"github.com/jobguard/jobguard/internal/sqlfile"
	"github.com/jobguard/jobguard/jobguard"
)

// LimitsTableDefault is the table TableLimits reads, created by Migration.
const LimitsTableDefault = "job_type_limits"

//go:embed migrations/*.sql
var embedded embed.FS

// MigrationFiles holds the SQL files that create the default limits table
// (job_type text, max_runtime interval, and mode text, each type's Mode),
// named in the order they apply.
// Each can be run more than once, so any migration tool can take them.
//
// Migration is the SQL of every file in MigrationFiles, in order, as one string.
var MigrationFiles, Migration = sqlfile.Load(embedded, "migrations")

// Limits gives the maximum runtime of each job type. Sweep asks for them at
// the start of every pass, so an operator's change takes effect at the next
// sweep. A type absent from the map has no limit: its jobs are skipped with
// a warning, never reclaimed. A limit that is not positive would make every
// job of its type overdue at once: the sweep refuses it (a *LimitError
// naming the type) and reclaims nothing. An error, or a panic, fails the sweep.
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
//
// An interval longer than the longest duration, LimitMax (about 292
// years), '1000 years' and 'infinity' included, reads as LimitMax: a limit
// no job reaches, which is what so long a limit says. A limit that is not
// positive (a table of one's own without the bundled CHECK, '-infinity')
// would make every job of its type overdue at once: Limits refuses it with
// an error naming the type, and the sweep reclaims nothing until the row is
// fixed.
//
// It reads each type's Mode from the column mode of the second migration
// file (LimitsAndModes); on a table without it, every type is in
// ModeReclaim, and SetMode asks for the migration.
type TableLimits struct {
	db       jobguard.DB
	sql      string
	withMode string
	upsert   string
	setMode  string
}

// LimitMax is the longest limit: the longest time.Duration, in whole
// microseconds (an interval's precision), 2562047h47m16.854775s. A longer
// limit in the limits table reads as LimitMax.
const LimitMax = interval.Max

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
	// Microseconds, the interval's own precision, so no float is involved,
	// read and written through one checked conversion.
	return &TableLimits{db: cfg.DB,
		sql:      `SELECT job_type::text, ` + interval.Read("max_runtime") + ` FROM ` + name,
		withMode: `SELECT job_type::text, ` + interval.Read("max_runtime") + `, mode::text FROM ` + name,
		upsert: `INSERT INTO ` + name + ` (job_type, max_runtime) VALUES ($1, ` + interval.Param("$2") + `)` +
			` ON CONFLICT (job_type) DO UPDATE SET max_runtime = EXCLUDED.max_runtime`,
		// $1 the type, $2 the mode.
		setMode: `UPDATE ` + name + ` SET mode = $2 WHERE job_type = $1`,
	}, nil
}

// Set stores jobType's limit, replacing the one it had; the next sweep
// uses it. It is the explicit step that applies a Suggestion. The limit is
// stored in whole microseconds, rounded up: a limit is never shorter than
// asked. One shorter than a microsecond is refused; one longer than
// LimitMax reads back as LimitMax.
func (l *TableLimits) Set(ctx context.Context, jobType string, limit time.Duration) error {
	if limit < time.Microsecond {
		return fmt.Errorf("reclaim: set limit of %q: %v is not positive (a microsecond at least)", jobType, limit)
	}
	if _, err := l.db.Exec(ctx, l.upsert, jobType, interval.Micros(limit)); err != nil {
		return fmt.Errorf("reclaim: set limit of %q: %w", jobType, err)
	}
	return nil
}

// Limits reads the whole table. It refuses a limit that is not positive,
// naming its type (a *LimitError), and reads one longer than LimitMax as
// LimitMax.
func (l *TableLimits) Limits(ctx context.Context) (map[string]time.Duration, error) {
	limits, _, err := l.LimitsAndModes(ctx)
	return limits, err
}

// LimitsAndModes reads the whole table, as Limits does, and each type's
// mode, in one query. On a table without the mode column (the second
// migration file not yet applied), it reads the limits alone, and every
// type is in ModeReclaim: no type can have been paused.
func (l *TableLimits) LimitsAndModes(ctx context.Context) (map[string]time.Duration, map[string]Mode, error) {
	limits, modes, err := l.read(ctx, l.withMode, true)
	if noModeColumn(err) {
		limits, modes, err = l.read(ctx, l.sql, false)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reclaim: limits: %w", err)
	}
	return limits, modes, nil
}

// SetMode sets jobType's mode; the next sweep uses it. The type must have
// a limit: a type without one is never reclaimed anyway.
func (l *TableLimits) SetMode(ctx context.Context, jobType string, mode Mode) error {
	if !mode.Valid() {
		return fmt.Errorf("reclaim: set mode of %q: %q is not a mode (want %q, %q or %q)", jobType, mode, ModeReclaim, ModeShadow, ModeOff)
	}
	tag, err := l.db.Exec(ctx, l.setMode, jobType, string(mode))
	if noModeColumn(err) {
		return fmt.Errorf("reclaim: set mode of %q: the limits table has no column mode: apply reclaim's migration files (%w)", jobType, err)
	}
	if err != nil {
		return fmt.Errorf("reclaim: set mode of %q: %w", jobType, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("reclaim: set mode of %q: %w", jobType, ErrNoLimit)
	}
	return nil
}

// noModeColumn reports whether err is PostgreSQL's undefined_column: the
// limits table predates the mode column.
func noModeColumn(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42703"
}

// ErrNoLimit is SetMode's error for a type without a limit, whose jobs
// are never reclaimed whatever its mode.
var ErrNoLimit = errors.New("the type has no limit (its jobs are never reclaimed); set one first")

// read runs sql, which selects the type, the limit in microseconds and,
// when withMode, the mode.
func (l *TableLimits) read(ctx context.Context, sql string, withMode bool) (map[string]time.Duration, map[string]Mode, error) {
	rows, err := l.db.Query(ctx, sql)
	if err != nil {
		return nil, nil, err
	}
	return scanLimits(rows, withMode)
}

// scanLimits reads the rows of one of TableLimits' reads: the type, the
// limit in microseconds and, when withMode, the mode.
func scanLimits(rows pgx.Rows, withMode bool) (map[string]time.Duration, map[string]Mode, error) {
	out, modes := map[string]time.Duration{}, map[string]Mode{}
	var typ, mode string
	var us int64
	scan := []any{&typ, &us}
	if withMode {
		scan = append(scan, &mode)
	}
	_, err := pgx.ForEachRow(rows, scan, func() error {
		// Beyond the range, a limit is clamped: longer than LimitMax is
		// never reached either way.
		d, _ := interval.FromMicros(us)
		if d <= 0 {
			return &LimitError{Type: typ, Limit: d}
		}
		out[typ] = d
		if withMode && Mode(mode) != ModeReclaim {
			modes[typ] = Mode(mode)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return out, modes, nil
}

// LimitError is the error of a limit that is not positive: it would make
// every job of its type overdue at once, so no sweep runs on it.
type LimitError struct {
	// Type is the job type.
	Type string
	// Limit is its limit, clamped to ±LimitMax.
	Limit time.Duration
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("limit of job type %q is %v, not positive: every job of the type would be overdue at once; "+
		"fix or delete it", e.Type, e.Limit)
}

// checkLimits refuses the first limit that is not positive, in the order of
// the types, whatever Limits gave it.
func checkLimits(limits map[string]time.Duration) error {
	for _, typ := range slices.Sorted(maps.Keys(limits)) {
		if d := limits[typ]; d <= 0 {
			return &LimitError{Type: typ, Limit: d}
		}
	}
	return nil
}
