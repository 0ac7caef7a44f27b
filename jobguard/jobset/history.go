package jobset

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/jobguard/jobguard/internal/interval"
	"github.com/jobguard/jobguard/internal/pgarray"
	"github.com/jobguard/jobguard/jobguard"
)

// HistoryQuery selects the finished jobs History summarizes.
type HistoryQuery struct {
	// Limits names the job types to summarize, each with the limit its
	// OverLimit counts are measured against (zero: none). On a table
	// without a type column, the type is "". Required.
	Limits map[string]time.Duration
	// Window keeps the jobs whose updated-at column is within Window of
	// the database's now. Required.
	Window time.Duration
	// PerType keeps at most the latest PerType finished jobs of each type.
	// Required.
	PerType int
	// Percentile, above 0 and at most 1, is computed beside the median, p90
	// and p99 into TypeHistory.AtPercentile. Defaults to 0.99.
	Percentile float64
}

// TypeHistory summarizes the finished jobs of one type. A job's runtime is
// that of its last attempt: from its started-at column (stamped by Start)
// to its updated-at column (stamped by the completion). The percentiles
// interpolate between runtimes (PostgreSQL's percentile_cont).
type TypeHistory struct {
	// Type is the job type.
	Type string
	// Completed is the number of COMPLETED jobs summarized. The durations
	// below are theirs, and zero when there are none.
	Completed int
	// P50, P90 and P99 are percentiles of their runtimes, and Max the
	// longest.
	P50, P90, P99, Max time.Duration
	// AtPercentile is the runtime at HistoryQuery.Percentile.
	AtPercentile time.Duration
	// OverLimit counts the completions that ran longer than the type's
	// limit in HistoryQuery.Limits: work a reclaimer with that limit could
	// have thrown away, had the jobs stopped beating. Zero without a limit.
	OverLimit int
	// Reclaimed counts the FAILED jobs whose failure reason starts with the
	// guard's Shared.ReclaimedReason.
	Reclaimed int
	// Failed counts the other FAILED jobs.
	Failed int
}

// History summarizes, per job type and in one statement, the runtimes of
// the latest finished (COMPLETED or FAILED) jobs. For each type it reads
// one index range, the PerType latest jobs within the window, given an
// index on (type, updated_at) over the finished statuses (the bundled
// migration's jobs_finished_idx); without it each type is a scan of the
// table. Jobs without a start time are left out. The table needs a
// started-at column (ErrNoStartedAt).
func (s *Set) History(ctx context.Context, db jobguard.DB, q HistoryQuery) ([]TypeHistory, error) {
	switch {
	case s.sql.History == "":
		return nil, fmt.Errorf("jobguard: history: %w", ErrNoStartedAt)
	case len(q.Limits) == 0:
		return nil, fmt.Errorf("jobguard: history: Limits names no type")
	case q.Window <= 0:
		return nil, fmt.Errorf("jobguard: history: Window %v is not positive", q.Window)
	case q.PerType <= 0:
		return nil, fmt.Errorf("jobguard: history: PerType %d is not positive", q.PerType)
	case q.Percentile == 0:
		q.Percentile = 0.99
	case q.Percentile < 0 || q.Percentile > 1 || math.IsNaN(q.Percentile):
		return nil, fmt.Errorf("jobguard: history: Percentile %v is not in (0, 1]", q.Percentile)
	}
	types := slices.Sorted(maps.Keys(q.Limits))
	limits := make([]int64, len(types))
	for i, typ := range types {
		limits[i] = interval.Micros(q.Limits[typ])
	}
	rows, err := db.Query(ctx, s.sql.History, pgarray.Of(types), pgarray.Of(limits), interval.Micros(q.Window), q.PerType,
		q.Percentile, s.guard.Shared().ReclaimedReason)
	if err != nil {
		return nil, fmt.Errorf("jobguard: history: %w", err)
	}
	defer rows.Close()
	var out []TypeHistory
	for rows.Next() {
		var h TypeHistory
		var pct []*float64
		var max, at *float64
		if err := rows.Scan(&h.Type, &h.Completed, &pct, &at, &max, &h.OverLimit, &h.Reclaimed, &h.Failed); err != nil {
			return nil, fmt.Errorf("jobguard: history: %w", err)
		}
		if len(pct) == 3 {
			h.P50, h.P90, h.P99 = seconds(pct[0]), seconds(pct[1]), seconds(pct[2])
		}
		h.AtPercentile, h.Max = seconds(at), seconds(max)
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("jobguard: history: %w", err)
	}
	return out, nil
}

// seconds converts a number of seconds, NULL when there were no rows, to
// a duration rounded to the microsecond, the timestamps' precision. A
// runtime longer than a duration holds (a start stamped centuries ago)
// reads as the longest one.
func seconds(s *float64) time.Duration {
	if s == nil {
		return 0
	}
	d, _ := interval.FromSeconds(*s)
	return d
}
