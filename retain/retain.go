package retain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"

	"github.com/jobguard/jobguard/internal/interval"
	"github.com/jobguard/jobguard/internal/safe"
)

// Defaults of Config.
const (
	// BatchDefault is how many rows one batch removes.
	BatchDefault = 1000
	// LockTimeoutDefault bounds how long a batch waits for a lock (a table
	// lock; rows are skipped, never waited on).
	LockTimeoutDefault = time.Second
	// IntervalDefault is Run's pause between sweeps.
	IntervalDefault = time.Hour
)

// Table is one table a Sweeper keeps bounded.
type Table struct {
	// Rule is the table's rule, from the package that owns the table.
	// Required.
	Rule Rule
	// Age is how old a finished row must be, by its rule's column on the
	// database's clock, before it is removed. A negative age is refused.
	// Defaults to Rule.DefaultAge().
	Age time.Duration
	// Keep keeps every row of the table: the sweep leaves it alone, and
	// its report says so. Defaults to false.
	Keep bool
}

// Config configures a Sweeper.
type Config struct {
	// DB holds the tables. Each batch is a short transaction of its own.
	// Required.
	DB *pgxpool.Pool
	// Tables are swept in order. Required: at least one.
	Tables []Table
	// Batch is how many rows one batch removes. Defaults to BatchDefault.
	Batch int
	// LockTimeout is the lock_timeout of each batch. Defaults to
	// LockTimeoutDefault.
	LockTimeout time.Duration
	// Interval is Run's pause between sweeps. Defaults to IntervalDefault.
	Interval time.Duration
	// Logger receives one summary line per sweep (info, or warn when a
	// table's pass failed). Defaults to slog.Default().
	Logger *slog.Logger
	// MeterProvider receives jobguard.retain.rows and
	// jobguard.retain.sweep.duration. Defaults to nil: no metrics.
	MeterProvider metric.MeterProvider
}

// Sweeper removes the finished rows of its tables. Build it with New; it
// is safe for concurrent use, and any number of processes may sweep the
// same tables at once (each skips the rows the other holds).
type Sweeper struct {
	cfg Config
	log *slog.Logger
	met *retainMetrics
}

// New validates cfg and fills in its defaults.
func New(cfg Config) (*Sweeper, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("retain: new: %w", err)
	}
	cfg = cfg.withDefaults()
	names := make([]string, len(cfg.Tables))
	for i, t := range cfg.Tables {
		names[i] = t.Rule.name
	}
	return &Sweeper{cfg: cfg, log: cfg.Logger, met: newRetainMetrics(cfg.MeterProvider, names)}, nil
}

func (cfg Config) validate() error {
	switch {
	case cfg.DB == nil:
		return errors.New("DB is nil")
	case len(cfg.Tables) == 0:
		return errors.New("Tables is empty")
	case cfg.Batch < 0:
		return fmt.Errorf("Batch %d is negative", cfg.Batch)
	}
	if err := errors.Join(interval.Check("LockTimeout", cfg.LockTimeout), interval.Check("Interval", cfg.Interval)); err != nil {
		return err
	}
	for i, t := range cfg.Tables {
		switch {
		case t.Rule.remove == "":
			return fmt.Errorf("Tables[%d]: Rule is empty (build it with the owner's Retention or NewRule)", i)
		case t.Age < 0:
			return fmt.Errorf("Tables[%d] (%s): Age %v is negative (set Keep to keep every row)", i, t.Rule.name, t.Age)
		}
	}
	return nil
}

func (cfg Config) withDefaults() Config {
	if cfg.Batch == 0 {
		cfg.Batch = BatchDefault
	}
	if cfg.LockTimeout == 0 {
		cfg.LockTimeout = LockTimeoutDefault
	}
	if cfg.Interval == 0 {
		cfg.Interval = IntervalDefault
	}
	cfg.Tables = append([]Table(nil), cfg.Tables...)
	for i := range cfg.Tables {
		if cfg.Tables[i].Age == 0 {
			cfg.Tables[i].Age = cfg.Tables[i].Rule.defAge
		}
	}
	cfg.Logger = safe.Logger(cfg.Logger)
	return cfg
}

// Sweep removes every finished row older than its table's age, batch by
// batch, table by table, and reports what it removed. A table whose pass
// fails (a lock it could not take in LockTimeout, the database) keeps what
// it removed before, reports its error, and the next table is swept; the
// returned error joins them. It logs one summary line.
func (s *Sweeper) Sweep(ctx context.Context) (Report, error) {
	start := time.Now()
	rep := Report{Tables: make([]TableReport, len(s.cfg.Tables))}
	var errs []error
	for i, t := range s.cfg.Tables {
		rep.Tables[i] = s.sweepTable(ctx, t)
		if err := rep.Tables[i].Err; err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", t.Rule.name, err))
		}
		s.met.removed(ctx, i, rep.Tables[i].Removed)
	}
	rep.Took = time.Since(start)
	err := errors.Join(errs...)
	s.met.swept(ctx, err, rep.Took)
	s.summarize(ctx, rep, err)
	if err != nil {
		return rep, fmt.Errorf("retain: sweep: %w", err)
	}
	return rep, nil
}

// sweepTable runs t's batches until one removes fewer rows than a batch:
// the rest are young, held by another transaction, or gone.
func (s *Sweeper) sweepTable(ctx context.Context, t Table) TableReport {
	tr := TableReport{Table: t.Rule.name, Age: t.Age, Keep: t.Keep}
	if t.Keep {
		return tr
	}
	age := interval.Micros(t.Age)
	for {
		if err := ctx.Err(); err != nil {
			tr.Err = err
			return tr
		}
		n, oldest, newest, err := s.batch(ctx, t.Rule, age)
		if err != nil {
			tr.Err = err
			return tr
		}
		tr.Batches++
		tr.add(n, oldest, newest)
		if n < int64(s.cfg.Batch) {
			return tr
		}
	}
}

// batch removes one batch in a transaction of its own, under LockTimeout.
func (s *Sweeper) batch(ctx context.Context, r Rule, age int64) (n int64, oldest, newest *time.Time, err error) {
	err = pgx.BeginFunc(ctx, s.cfg.DB, func(tx pgx.Tx) error {
		// Each batch is planned with its own age and size. A generic plan,
		// which a connection settles on after a few batches, knows
		// neither: it guesses the LIMIT at a tenth of the rows the age
		// might match, and on a large table of mostly settled rows it
		// scans the table for the rows to lock and hashes the whole table
		// to delete them by ctid, every batch.
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true), set_config('plan_cache_mode', 'force_custom_plan', true)`,
			interval.Millis(s.cfg.LockTimeout)); err != nil {
			return err
		}
		return tx.QueryRow(ctx, r.remove, age, s.cfg.Batch).Scan(&n, &oldest, &newest)
	})
	return n, oldest, newest, err
}

// Preview reports what Sweep would remove now, per table, and changes
// nothing: the count of finished rows older than the age and the oldest
// and newest of them (rows another transaction holds included). Removed
// holds the count; Batches stays 0.
func (s *Sweeper) Preview(ctx context.Context) (Report, error) {
	start := time.Now()
	rep := Report{DryRun: true, Tables: make([]TableReport, len(s.cfg.Tables))}
	var errs []error
	for i, t := range s.cfg.Tables {
		tr := TableReport{Table: t.Rule.name, Age: t.Age, Keep: t.Keep}
		if !t.Keep {
			tr.Err = s.cfg.DB.QueryRow(ctx, t.Rule.preview, interval.Micros(t.Age)).Scan(&tr.Removed, &tr.Oldest, &tr.Newest)
		}
		if tr.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", t.Rule.name, tr.Err))
		}
		rep.Tables[i] = tr
	}
	rep.Took = time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return rep, fmt.Errorf("retain: preview: %w", err)
	}
	return rep, nil
}

// Run sweeps every Interval until ctx ends, starting at once. Each sweep
// logs its own line; Run returns nil when ctx ends.
func (s *Sweeper) Run(ctx context.Context) error {
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	for {
		// A panic of the logger or the meter must not end the loop.
		err := safe.Call(func() error {
			_, err := s.Sweep(ctx)
			return err
		})
		safe.Recovered(ctx, s.log, "retain: sweep recovered from a panic", err)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
