package reclaim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
)

// Source lists the jobs a queue considers active, a page at a time, so that
// a sweep's memory is bounded by the page size (and the jobs it decides to
// reclaim, held for the Brake) and not by the number of running jobs. Active calls page with each page in turn and stops at the
// first error page returns, returning it. A failure to read the source
// fails the sweep (pages already handled stand); a failure to read one job
// is reported in that job's Err and the job is skipped. A source that
// panics fails the sweep the same way: the error wraps a
// *jobguard.PanicError.
//
// A queue that moves while it is paged through (jobs finishing, others
// starting) may list a job on two pages or on none: a job missed is seen at
// the next sweep, a job listed twice is decided twice on the same row, which
// the conditional write makes harmless.
type Source interface {
	Active(ctx context.Context, q Query, page func([]ActiveJob) error) error
}

// Query is what a sweep asks of its source.
type Query struct {
	// Limits are the sweep's limits by job type. A source that reads the
	// jobs table itself (TableSource) lists only the jobs over their limit;
	// a queue lists every active job, since a listing within its limit may
	// be the current attempt of a row listed again with an older start.
	Limits map[string]time.Duration
	// PageSize is the most jobs a page should hold.
	PageSize int
}

// Shortest returns the shortest of q.Limits, or 0 when there are none: no
// job that has run for less can be over its limit.
func (q Query) Shortest() time.Duration {
	var least time.Duration
	for _, d := range q.Limits {
		if least == 0 || d < least {
			least = d
		}
	}
	return least
}

// ActiveJob is one active job as the queue sees it: a listing.
type ActiveJob struct {
	// ID is the id of the job's row in the jobs table, in any spelling the
	// id column accepts (a uuid in either letter case): the sweep folds the
	// listings of one row together.
	ID string
	// Type selects the job's runtime limit and parent rule.
	Type string
	// StartedAt is when this listing's attempt started, by the queue's
	// clock. The zero time means the queue does not know. The row's own
	// start column, when the table has one, is read too: the later of the
	// two is the current attempt's start. A job with neither is skipped and
	// counted in Report.NoStartTime, never guessed.
	StartedAt time.Time
	// ReadAt, when set, is the clock that stamped StartedAt, read when the
	// job was listed (River's source reads the database's now() with
	// attempted_at), so that the runtime is measured on one clock. Defaults
	// to the zero time: StartedAt is measured with the reclaimer's clock
	// (Config.Now), and skew between the queue's clock and the reclaimer's
	// shifts the limit by as much.
	ReadAt time.Time
	// Generation is the generation of the execution this listing runs, when
	// the source knows it (a worker that stores what Start returned in the
	// queue job's data): a row whose generation has moved past it was
	// restarted or retried since, and the listing is stale. Defaults to 0:
	// unknown.
	Generation int64
	// Err is set when the job could not be read. The job is skipped and
	// counted in Report.SourceErrors; the sweep's summary names the first
	// error.
	Err error
	// Row, when set, is the job's row, read by the source in the same query
	// as the listing (TableSource does), with its ReadAt. Sweep then decides
	// on it and matches its write against it instead of reading the row
	// again. Defaults to nil: Sweep reads the rows it needs in one query per
	// page.
	Row *jobset.Job
}

// TableSource reads the active jobs from the jobs table itself: the
// PROCESSING rows whose started-at column (stamped by StartGuard.Start) is
// older than their type's limit, on the database's clock, a page at a time
// in id order. It reads the active job types (jobguard's ActiveTypes) once
// per sweep, then only the overdue rows (Overdue), one index range per
// type, so a sweep costs what the stuck jobs cost, not what the running ones
// do, given an index on (type, started_at) over the active statuses (the
// bundled migration has it). Jobs of a type with no limit are listed once
// they have run longer than the shortest limit, so that the sweep can report
// them. PROCESSING rows with no start time are not listed, so no sweep over
// the table can reclaim them: it counts them instead (CountUnstarted), in
// Report.NoStartTime. Create it with NewTableSource.
type TableSource struct {
	guard   *jobguard.Guard
	db      jobguard.DB
	running string // CountRunning's statement
}

var (
	_ Source           = (*TableSource)(nil)
	_ UnstartedCounter = (*TableSource)(nil)
)

// UnstartedCounter is a Source that never lists some active jobs because
// they have no start time, as TableSource does, and can count them. A
// sweep (and a plan) asks it once, after the listings (a TableSource's
// own count travels in one batch with the sweep's first reads instead,
// while it is quick; see Reclaimer.Sweep),
// and adds the count to Report.NoStartTime, so that jobs no sweep can ever reclaim are seen
// at every sweep, in its summary line and in jobguard.reclaim.decisions.
type UnstartedCounter interface {
	CountUnstarted(ctx context.Context) (int, error)
}

// CountUnstarted counts the PROCESSING rows whose start column is NULL, in
// one statement that reads one index range per job type (jobguard's
// jobset.Set.Unstarted).
func (s *TableSource) CountUnstarted(ctx context.Context) (int, error) {
	n, err := jobset.New(s.guard).Unstarted(ctx, s.db)
	if err != nil {
		return 0, fmt.Errorf("reclaim: table source: %w", err)
	}
	return n, nil
}

// NewTableSource returns the source over guard's table. The mapping must
// have a StartedAtColumn.
func NewTableSource(guard *jobguard.Guard, db jobguard.DB) (*TableSource, error) {
	if guard == nil {
		return nil, errors.New("reclaim: table source: guard is nil")
	}
	if db == nil {
		return nil, errors.New("reclaim: table source: db is nil")
	}
	if guard.Table().StartedAtColumn == "" {
		return nil, fmt.Errorf("reclaim: table source: table %s has no StartedAtColumn to read runtime from",
			guard.Table().QualifiedName())
	}
	return &TableSource{guard: guard, db: db, running: buildRunning(guard.Table())}, nil
}

// Active lists the jobs over their limit, each with its row: one query for
// the active types, then one per page.
func (s *TableSource) Active(ctx context.Context, q Query, page func([]ActiveJob) error) error {
	if q.PageSize <= 0 {
		return fmt.Errorf("reclaim: table source: PageSize %d is not positive", q.PageSize)
	}
	types, err := jobset.New(s.guard).ActiveTypes(ctx, s.db)
	if err != nil {
		return fmt.Errorf("reclaim: table source: %w", err)
	}
	return s.overdue(ctx, q, types, page)
}

// overdue lists the jobs over their limit of the active types, read
// before: one query per page. A sweep that read the types in one batch
// with the limits (see openTable) lists through it.
func (s *TableSource) overdue(ctx context.Context, q Query, types []string, page func([]ActiveJob) error) error {
	if q.PageSize <= 0 {
		return fmt.Errorf("reclaim: table source: PageSize %d is not positive", q.PageSize)
	}
	// A type that has no limit is listed once its jobs have run longer than
	// the shortest limit, so that the sweep can report it.
	limits := make(map[string]time.Duration, len(types))
	for _, typ := range types {
		if d, ok := q.Limits[typ]; ok {
			limits[typ] = d
		} else if d := q.Shortest(); d > 0 {
			limits[typ] = d
		}
	}
	if len(limits) == 0 {
		return nil
	}
	// One row past the page says whether another page follows, without a
	// query that finds nothing.
	oq := jobset.OverdueQuery{Limits: limits, Max: q.PageSize + 1}
	for {
		rows, err := jobset.New(s.guard).Overdue(ctx, s.db, oq)
		if err != nil {
			return fmt.Errorf("reclaim: table source: %w", err)
		}
		more := len(rows) > q.PageSize
		rows = rows[:min(len(rows), q.PageSize)]
		if len(rows) == 0 {
			return nil
		}
		jobs := make([]ActiveJob, len(rows))
		for i := range rows {
			jobs[i] = ActiveJob{ID: rows[i].ID, Type: rows[i].Type, Row: &rows[i]}
		}
		if err := page(jobs); err != nil {
			return err
		}
		if !more {
			return nil
		}
		oq.After = rows[len(rows)-1].ID
	}
}

// runtime is how long the listing's attempt has run, on the queue's clock
// when the listing read it, else on now.
func (l ActiveJob) runtime(now time.Time) time.Duration {
	if !l.ReadAt.IsZero() {
		now = l.ReadAt
	}
	return now.Sub(l.StartedAt)
}
