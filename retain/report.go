package retain

import (
	"context"
	"log/slog"
	"time"
)

// Report is what one sweep (or preview) did, per table in Config order.
type Report struct {
	Tables []TableReport
	// DryRun is true for a Preview: nothing was removed.
	DryRun bool
	Took   time.Duration
}

// Removed is the number of rows removed from every table (for a Preview,
// that a sweep would remove).
func (r Report) Removed() int64 {
	var n int64
	for _, t := range r.Tables {
		n += t.Removed
	}
	return n
}

// TableReport is what a sweep did to one table.
type TableReport struct {
	// Table is the rule's name.
	Table string
	// Age is the age the table was swept with.
	Age time.Duration
	// Keep is true when the table keeps every row: nothing was looked at.
	Keep bool
	// Removed counts the rows removed (for a Preview: the rows a sweep
	// would remove).
	Removed int64
	// Batches counts the batches that ran.
	Batches int
	// Oldest and Newest are the rule's column of the oldest and newest row
	// removed; nil when none was.
	Oldest, Newest *time.Time
	// Err is why the table's pass stopped early, or nil.
	Err error
}

func (t *TableReport) add(n int64, oldest, newest *time.Time) {
	t.Removed += n
	if oldest != nil && (t.Oldest == nil || oldest.Before(*t.Oldest)) {
		t.Oldest = oldest
	}
	if newest != nil && (t.Newest == nil || newest.After(*t.Newest)) {
		t.Newest = newest
	}
}

// summarize logs the one line of a sweep: the rows removed from each table
// (by its name; "keep" for a table kept forever), how long it took, and,
// at warn, the error of any table whose pass stopped.
func (s *Sweeper) summarize(ctx context.Context, rep Report, err error) {
	removed := make([]any, 0, len(rep.Tables))
	for _, t := range rep.Tables {
		if t.Keep {
			removed = append(removed, slog.String(t.Table, "keep"))
			continue
		}
		removed = append(removed, slog.Int64(t.Table, t.Removed))
	}
	attrs := []slog.Attr{slog.Group("removed", removed...), slog.Int64("total", rep.Removed()), slog.Duration("took", rep.Took)}
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	s.log.LogAttrs(ctx, level, "retain: sweep", attrs...)
}
