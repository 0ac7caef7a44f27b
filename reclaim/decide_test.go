package reclaim

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/jobguard/jobset"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	st := jobguard.Statuses{Queued: "QUEUED", Processing: "PROCESSING", Completed: "COMPLETED", Failed: "FAILED"}
	// The reclaimer's clock and the database's differ by a quarter of an
	// hour: each time is measured on its own clock.
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	db := now.Add(-15 * time.Minute)
	known := rule{limit: 30 * time.Minute, known: true, now: now, noProgress: 15 * time.Minute}
	queuedAgo := func(d time.Duration) time.Time { return now.Add(-d) }
	// row is a PROCESSING row of generation 2 as the database read it:
	// started startedAgo and last progressed updatedAgo before its ReadAt.
	row := func(status string, startedAgo, updatedAgo time.Duration) *jobset.Job {
		r := &jobset.Job{Status: status, Generation: 2, ReadAt: db, UpdatedAt: db.Add(-updatedAgo)}
		if startedAgo > 0 {
			r.StartedAt = db.Add(-startedAgo)
		}
		return r
	}
	stuck := row(st.Processing, 2*time.Hour, time.Hour)

	for name, tc := range map[string]struct {
		listing ActiveJob
		row     *jobset.Job
		rule    rule
		want    Decision
	}{
		"unreadable listing": {
			listing: ActiveJob{Err: errors.New("garbled"), StartedAt: queuedAgo(2 * time.Hour)},
			row:     stuck, rule: known, want: DecisionSourceError,
		},
		"type without a limit": {
			listing: ActiveJob{StartedAt: queuedAgo(2 * time.Hour)},
			row:     stuck, rule: rule{now: now, noProgress: 15 * time.Minute}, want: DecisionUnknownType,
		},
		"queue start within the limit settles it": {
			listing: ActiveJob{StartedAt: queuedAgo(10 * time.Minute)},
			row:     nil, rule: known, want: DecisionWithinLimit,
		},
		"exactly at the limit is within it": {
			listing: ActiveJob{StartedAt: queuedAgo(30 * time.Minute)},
			row:     stuck, rule: known, want: DecisionWithinLimit,
		},
		"queue start on the queue's own clock": {
			listing: ActiveJob{StartedAt: db.Add(-10 * time.Minute), ReadAt: db},
			row:     stuck, rule: known, want: DecisionWithinLimit,
		},
		"no row": {
			listing: ActiveJob{StartedAt: queuedAgo(2 * time.Hour)},
			row:     nil, rule: known, want: DecisionNotActive,
		},
		"finished row": {
			listing: ActiveJob{StartedAt: queuedAgo(2 * time.Hour)},
			row:     row(st.Completed, 2*time.Hour, time.Hour), rule: known, want: DecisionNotActive,
		},
		"retried row waiting in a backlog": {
			listing: ActiveJob{StartedAt: queuedAgo(2 * time.Hour)},
			row:     row(st.Queued, 0, 20*time.Minute), rule: known, want: DecisionStale,
		},
		"row of a newer generation": {
			listing: ActiveJob{StartedAt: queuedAgo(2 * time.Hour), Generation: 1},
			row:     stuck, rule: known, want: DecisionStale,
		},
		"row of the listing's generation": {
			listing: ActiveJob{StartedAt: queuedAgo(2 * time.Hour), Generation: 2},
			row:     stuck, rule: known, want: DecisionReclaim,
		},
		"row restarted since the listing's attempt": {
			listing: ActiveJob{StartedAt: queuedAgo(2 * time.Hour)},
			row:     row(st.Processing, 16*time.Minute, 16*time.Minute), rule: known, want: DecisionStale,
		},
		"no start anywhere": {
			listing: ActiveJob{},
			row:     row(st.Processing, 0, time.Hour), rule: known, want: DecisionNoStartTime,
		},
		"row's start alone, within the limit": {
			listing: ActiveJob{},
			row:     row(st.Processing, 20*time.Minute, 20*time.Minute), rule: known, want: DecisionWithinLimit,
		},
		"row's start alone, over the limit": {
			listing: ActiveJob{},
			row:     stuck, rule: known, want: DecisionReclaim,
		},
		"queue start alone, over the limit": {
			listing: ActiveJob{StartedAt: queuedAgo(2 * time.Hour)},
			row:     row(st.Processing, 0, time.Hour), rule: known, want: DecisionReclaim,
		},
		"progress within the threshold, on the database's clock": {
			listing: ActiveJob{StartedAt: queuedAgo(2 * time.Hour)},
			row:     row(st.Processing, 2*time.Hour, 4*time.Minute), rule: known, want: DecisionProgressing,
		},
		"progress exactly at the threshold is no progress": {
			listing: ActiveJob{StartedAt: queuedAgo(2 * time.Hour)},
			row:     row(st.Processing, 2*time.Hour, 15*time.Minute), rule: known, want: DecisionReclaim,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want.String(), decide(tc.listing, tc.row, tc.rule, st).String())
		})
	}
}

func TestMergeListings(t *testing.T) {
	t.Parallel()
	old := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	recent := old.Add(time.Hour)
	unreadable := ActiveJob{ID: "a", Err: errors.New("garbled")}
	for name, tc := range map[string]struct{ a, b, want ActiveJob }{
		"the later start is the current attempt's": {
			a:    ActiveJob{ID: "a", Type: "chapter", StartedAt: old, Generation: 3},
			b:    ActiveJob{ID: "a", Type: "chapter-v2", StartedAt: recent, Generation: 2},
			want: ActiveJob{ID: "a", Type: "chapter-v2", StartedAt: recent, Generation: 3},
		},
		"in either order": {
			a:    ActiveJob{ID: "a", Type: "chapter-v2", StartedAt: recent},
			b:    ActiveJob{ID: "a", Type: "chapter", StartedAt: old},
			want: ActiveJob{ID: "a", Type: "chapter-v2", StartedAt: recent},
		},
		"an unreadable listing gives way": {
			a:    unreadable,
			b:    ActiveJob{ID: "a", StartedAt: old},
			want: ActiveJob{ID: "a", StartedAt: old},
		},
		"to a readable one in either order": {
			a:    ActiveJob{ID: "a", StartedAt: old},
			b:    unreadable,
			want: ActiveJob{ID: "a", StartedAt: old},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, mergeListings(tc.a, tc.b))
		})
	}
}
