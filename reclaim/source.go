package reclaim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobguard/jobguard/jobguard"
)

// Source lists the jobs a queue considers active. It is read once per
// sweep. A failure to read the whole source fails the sweep; a failure to
// read one job is reported in that job's Err and the job is skipped.
type Source interface {
	Active(ctx context.Context) ([]ActiveJob, error)
}

// ActiveJob is one active job as the queue sees it.
type ActiveJob struct {
	// ID is the id of the job's row in the jobs table.
	ID string
	// Type selects the job's runtime limit and parent rule.
	Type string
	// StartedAt is when the current attempt started, by the queue's clock.
	// The zero time means the queue does not know: the job is skipped and
	// counted in Report.NoStartTime, never guessed.
	StartedAt time.Time
	// Err is set when the job could not be read. The job is skipped, logged
	// as a warning and counted in Report.SourceErrors.
	Err error
	// Row, when set, is the job's row, read by the source in the same query
	// as the start time (TableSource does). Sweep then decides on it and
	// matches its write against it instead of reading the row again.
	// Defaults to nil: Sweep reads the rows of the jobs over their limit in
	// one query.
	Row *jobguard.JobState
}

// TableSource reads the active jobs from the jobs table itself: every
// PROCESSING row, its type column as the type and its started-at column
// (stamped by StartGuard.Start) as the start of the current attempt.
// Create it with NewTableSource.
type TableSource struct {
	guard *jobguard.Guard
	db    jobguard.DB
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
	return &TableSource{guard: guard, db: db}, nil
}

// Active returns every PROCESSING job, with its row, in one query.
func (s *TableSource) Active(ctx context.Context) ([]ActiveJob, error) {
	states, err := s.guard.ActiveJobs(ctx, s.db)
	if err != nil {
		return nil, err
	}
	out := make([]ActiveJob, len(states))
	for i, st := range states {
		out[i] = ActiveJob{ID: st.ID, Type: st.Type, StartedAt: st.StartedAt, Row: &states[i]}
	}
	return out, nil
}
