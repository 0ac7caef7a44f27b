package jobguard

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// whyRefused is the one rule behind every refusal's Reason: the guarded
// writes', Start's and Resume's. No database: a row as a read found it.
func TestWhyRefused(t *testing.T) {
	t.Parallel()
	st := DefaultTable().Statuses
	complete := guarded{op: OpComplete, allowed: []string{st.Queued, st.Processing}, fenced: true}
	unfenced := guarded{op: OpComplete, allowed: []string{st.Queued, st.Processing}}
	start := guarded{op: OpStart, allowed: []string{st.Queued, st.Processing}}
	resume := guarded{op: OpResume, allowed: []string{st.Completed}, fenced: true}
	readErr := errors.New("connection reset")
	for _, tc := range []struct {
		name    string
		w       guarded
		want    int64
		r       row
		found   bool
		readErr error
		reason  Reason
		status  string // and generation, when the row was read
		gen     int64
	}{
		{"the read failed", complete, 3, row{}, false, readErr, ReasonUnread, "", 0},
		{"no row", complete, 3, row{}, false, nil, ReasonNotFound, "", 0},
		{"a newer generation owns the job", complete, 3, row{status: st.Processing, generation: 4}, true, nil, ReasonSuperseded, st.Processing, 4},
		{"superseded wins over the status", complete, 3, row{status: st.Failed, generation: 4}, true, nil, ReasonSuperseded, st.Failed, 4},
		{"terminal at the execution's generation", complete, 3, row{status: st.Failed, generation: 3}, true, nil, ReasonStatus, st.Failed, 3},
		{"writable again: it changed twice", complete, 3, row{status: st.Processing, generation: 3}, true, nil, ReasonUnknown, st.Processing, 3},
		{"status-only: the generation says nothing", unfenced, 3, row{status: st.Processing, generation: 9}, true, nil, ReasonUnknown, st.Processing, 9},
		{"status-only: terminal", unfenced, 0, row{status: st.Completed}, true, nil, ReasonStatus, st.Completed, 0},
		{"start: any generation", start, 0, row{status: st.Queued, generation: 7}, true, nil, ReasonUnknown, st.Queued, 7},
		{"start: a finished job", start, 0, row{status: st.Completed, generation: 7}, true, nil, ReasonStatus, st.Completed, 7},
		{"resume: completed by this execution", resume, 2, row{status: st.Completed, generation: 2}, true, nil, ReasonUnknown, st.Completed, 2},
		{"resume: completed by a later one", resume, 2, row{status: st.Completed, generation: 3}, true, nil, ReasonSuperseded, st.Completed, 3},
		{"resume: never completed", resume, 2, row{status: st.Failed, generation: 2}, true, nil, ReasonStatus, st.Failed, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := whyRefused(tc.w, "job-1", tc.want, ErrJobTerminal, tc.r, tc.found, tc.readErr)
			require.Equal(t, tc.reason, e.Reason, e.Error())
			require.Equal(t, tc.w.op, e.Op)
			require.Equal(t, "job-1", e.JobID)
			require.Equal(t, tc.want, e.Want)
			require.Equal(t, tc.status, e.Status)
			require.Equal(t, tc.gen, e.Generation)
			require.ErrorIs(t, e, ErrJobTerminal)
		})
	}
}

// A refusal whose row is QUEUED under a newer generation is a loss to
// another attempt of the job (a rescue, a Retry): it wraps ErrRequeued as
// well as ErrJobTerminal, and IsPermanent says the queue must deliver the
// job again. Any other refusal is permanent, as before.
func TestWhyRefused_QueuedUnderANewerGenerationIsRequeued(t *testing.T) {
	t.Parallel()
	st := DefaultTable().Statuses
	complete := guarded{op: OpComplete, allowed: []string{st.Queued, st.Processing}, fenced: true, queued: st.Queued}
	touch := guarded{op: OpTouch, allowed: []string{st.Processing}, fenced: true, queued: st.Queued}
	unfenced := guarded{op: OpComplete, allowed: []string{st.Queued, st.Processing}, queued: st.Queued}
	for _, tc := range []struct {
		name     string
		w        guarded
		r        row
		requeued bool
	}{
		{"rescued: QUEUED, one generation on", complete, row{status: st.Queued, generation: 4}, true},
		{"a heartbeat's refusal says the same", touch, row{status: st.Queued, generation: 4}, true},
		{"retried by an operator after a reclaim", complete, row{status: st.Queued, generation: 5}, true},
		{"started again since: another execution runs it", complete, row{status: st.Processing, generation: 5}, false},
		{"reclaimed", complete, row{status: st.Failed, generation: 3}, false},
		{"completed by another execution", complete, row{status: st.Completed, generation: 5}, false},
		{"QUEUED at an older generation: not another attempt", complete, row{status: st.Queued, generation: 2}, false},
		{"status-only: no generation to tell", unfenced, row{status: st.Queued, generation: 9}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := whyRefused(tc.w, "job-1", 3, ErrJobTerminal, tc.r, true, nil)
			require.ErrorIs(t, e, ErrJobTerminal)
			require.Equal(t, tc.requeued, errors.Is(e, ErrRequeued), e.Error())
			require.Equal(t, !tc.requeued, IsPermanent(e), e.Error())
			require.Equal(t, !tc.requeued, IsPermanent(fmt.Errorf("save: %w", e)), "wrapped")
		})
	}
}
