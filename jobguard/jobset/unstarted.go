package jobset

import (
	"context"
	"fmt"

	"github.com/jobguard/jobguard/jobguard"
)

// Unstarted counts, in one statement, the PROCESSING jobs whose started-at
// column is NULL: jobs Overdue never returns, so that a reclaimer reading
// the table itself can never reclaim them, and counts them instead. A row
// gets its start from StartGuard.Start; one without it was moved to
// PROCESSING some other way.
//
// It reads one index range per job type, given an index on (type,
// started_at) over the active statuses (the bundled migration's): the
// types are found by a loose scan, as ActiveTypes finds them, and each
// type's rows without a start are one range of that index, so the count
// costs what those rows cost, not what the running jobs do. The table needs
// a started-at column (ErrNoStartedAt).
func (s *Set) Unstarted(ctx context.Context, db jobguard.DB) (int, error) {
	if s.sql.Unstarted == "" {
		return 0, fmt.Errorf("jobguard: unstarted: %w", ErrNoStartedAt)
	}
	var n int64
	if err := db.QueryRow(ctx, s.sql.Unstarted).Scan(&n); err != nil {
		return 0, fmt.Errorf("jobguard: unstarted: %w", err)
	}
	return int(n), nil
}
