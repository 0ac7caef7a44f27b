package riversource

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jobguard/jobguard/internal/ident"
	"github.com/jobguard/jobguard/internal/pgarray"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim"
)

// RowIDKeyDefault is the default key, in a River job's args, of the id of
// the job's row in the jobs table.
const RowIDKeyDefault = "job_id"

// TableName is the name of River's jobs table.
const TableName = "river_job"

// ErrNoRowID is the per-job error of a running River job whose args do not
// name a row of the jobs table: the key is missing, null, empty, or not a
// string or an integer. The job is skipped, never guessed.
var ErrNoRowID = errors.New("riversource: job args do not name a row")

// Config configures a Source.
type Config struct {
	// DB reaches River's tables. Required.
	DB jobguard.DB
	// Schema holds River's tables, as given to River's Config.Schema and to
	// rivermigrate. Defaults to "": the table is found through search_path.
	Schema string
	// RowIDKey is the top-level key of a job's args that holds the id of the
	// job's row in the jobs table, as a JSON string or integer. Defaults to
	// RowIDKeyDefault.
	RowIDKey string
	// Queues, when set, limits the source to these River queues. Defaults
	// to nil: every queue.
	Queues []string
	// Types, when set, maps River job kinds to jobguard job types (the keys
	// of the reclaimer's limits and parent rules), and limits the source to
	// the kinds it lists: jobs of other kinds are not guarded rows and are
	// not read at all. Defaults to nil: every running job, its kind as its
	// type.
	Types map[string]string
}

// Source lists the running jobs of River's jobs table. It is safe for
// concurrent use.
type Source struct {
	db    jobguard.DB
	key   string
	query string
	args  []any
	types map[string]string
}

var _ reclaim.Source = (*Source)(nil)

// New validates cfg and returns the source. The SQL is built here, once.
func New(cfg Config) (*Source, error) {
	if cfg.DB == nil {
		return nil, errors.New("riversource: new: DB is nil")
	}
	if cfg.RowIDKey == "" {
		cfg.RowIDKey = RowIDKeyDefault
	}
	if strings.IndexByte(cfg.RowIDKey, 0) >= 0 {
		return nil, fmt.Errorf("riversource: new: RowIDKey %q contains a NUL byte", cfg.RowIDKey)
	}
	if cfg.Schema != "" {
		if err := ident.Check("Schema", cfg.Schema); err != nil {
			return nil, fmt.Errorf("riversource: new: %w", err)
		}
	}
	for i, q := range cfg.Queues {
		if q == "" {
			return nil, fmt.Errorf("riversource: new: Queues[%d] is empty", i)
		}
	}
	var kinds []string
	for kind, typ := range cfg.Types {
		if kind == "" || typ == "" {
			return nil, fmt.Errorf("riversource: new: Types maps %q to %q; neither may be empty", kind, typ)
		}
		kinds = append(kinds, kind)
	}

	// $1 is the last id of the previous page, $2 the page size, $3 the key;
	// the filters follow. The state is River's constant, not a caller's
	// value, so River's state indexes apply. MATERIALIZED keeps the planner
	// from walking the primary key, past every finished job River keeps, to
	// satisfy LIMIT in id order. now() is the clock attempted_at is stamped
	// with.
	var b strings.Builder
	b.WriteString(`WITH c AS MATERIALIZED (SELECT id, kind, attempted_at, jsonb_typeof(args -> $3::text) AS typ, args ->> $3::text AS val FROM `)
	b.WriteString(ident.Quote(cfg.Schema, TableName))
	b.WriteString(` WHERE state = 'running' AND id > $1`)
	args := []any{cfg.RowIDKey}
	if len(cfg.Queues) > 0 {
		args = append(args, pgarray.Of(cfg.Queues))
		fmt.Fprintf(&b, ` AND queue = ANY($%d::text[])`, len(args)+2)
	}
	if len(kinds) > 0 {
		args = append(args, pgarray.Of(kinds))
		fmt.Fprintf(&b, ` AND kind = ANY($%d::text[])`, len(args)+2)
	}
	b.WriteString(`) SELECT c.*, now() FROM c ORDER BY id LIMIT $2`)
	return &Source{db: cfg.DB, key: cfg.RowIDKey, query: b.String(), args: args, types: cfg.Types}, nil
}

// Active lists River's running jobs, q.PageSize at a time in River's id
// order, one query per page. StartedAt is the job's attempted_at: River sets
// it, by the database's clock, every time it fetches the job for an
// attempt, so it measures the current attempt (a retried, rescued or
// snoozed job starts over), and ReadAt is the database's clock read with
// it, so the runtime is measured on one clock. The type is the job's kind,
// or its mapping in Config.Types. ID is the row id from the job's args; a
// job whose args do not name a row is listed with ErrNoRowID and its River
// job id as ID, and is skipped by the sweep and counted. A job with no
// attempted_at has a zero StartedAt.
func (s *Source) Active(ctx context.Context, q reclaim.Query, page func([]reclaim.ActiveJob) error) error {
	if q.PageSize <= 0 {
		return fmt.Errorf("riversource: read %s: PageSize %d is not positive", TableName, q.PageSize)
	}
	var after int64
	for {
		jobs, last, err := s.page(ctx, after, q.PageSize)
		if err != nil {
			return fmt.Errorf("riversource: read %s: %w", TableName, err)
		}
		if len(jobs) == 0 {
			return nil
		}
		if err := page(jobs); err != nil {
			return err
		}
		if len(jobs) < q.PageSize {
			return nil
		}
		after = last
	}
}

// page reads the running jobs after River id after, and returns the last
// River id read.
func (s *Source) page(ctx context.Context, after int64, size int) ([]reclaim.ActiveJob, int64, error) {
	rows, err := s.db.Query(ctx, s.query, append([]any{after, size}, s.args...)...)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var out []reclaim.ActiveJob
	var last int64
	for rows.Next() {
		var (
			riverID   int64
			kind      string
			attempted *time.Time
			typ, val  *string
			now       time.Time
		)
		if err := rows.Scan(&riverID, &kind, &attempted, &typ, &val, &now); err != nil {
			return nil, 0, err
		}
		last = riverID
		job := reclaim.ActiveJob{Type: kind, ReadAt: now}
		if t, ok := s.types[kind]; ok {
			job.Type = t
		}
		if attempted != nil {
			job.StartedAt = *attempted
		}
		if id, err := rowID(s.key, typ, val); err != nil {
			job.ID = strconv.FormatInt(riverID, 10)
			job.Err = fmt.Errorf("riversource: river job %d: %w", riverID, err)
		} else {
			job.ID = id
		}
		out = append(out, job)
	}
	return out, last, rows.Err()
}

// rowID reads the row id from the JSON type and text of args -> key.
func rowID(key string, typ, val *string) (string, error) {
	switch {
	case typ == nil:
		return "", fmt.Errorf("%w: args have no key %q", ErrNoRowID, key)
	case *typ == "string" && val != nil && *val != "":
		return *val, nil
	case *typ == "number" && val != nil:
		if _, err := strconv.ParseInt(*val, 10, 64); err == nil {
			return *val, nil
		}
		return "", fmt.Errorf("%w: args key %q is %s; want a string or an integer", ErrNoRowID, key, *val)
	default:
		v := "an empty string"
		if *typ != "string" {
			v = "a JSON " + *typ
		}
		return "", fmt.Errorf("%w: args key %q is %s; want a string or an integer", ErrNoRowID, key, v)
	}
}
