package riverguard

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	ordinary := errors.New("model unavailable")
	terminal := fmt.Errorf("save: %w", jobguard.ErrJobTerminal)
	reclaimed := &jobguard.ReclaimedError{JobID: "j", Source: "marker"}
	unavailable := fmt.Errorf("%w: job j: marker lookup: refused", jobguard.ErrGuardUnavailable)
	lost := &watch.LostError{JobID: "j", Generation: 3, Via: watch.ViaNotice, Seen: 3}
	ownSnooze := river.JobSnooze(time.Minute)
	ownCancel := river.JobCancel(errors.New("the course was deleted"))

	for _, c := range []struct {
		name string
		err  error
		lost *watch.LostError
		// requeued is what the row reads when asked.
		requeued bool
		want     verdict
		// is lists errors the answer must still wrap.
		is []error
	}{
		{name: "success", want: done},
		{name: "ordinary error", err: ordinary, want: retry, is: []error{ordinary}},
		{name: "guard unavailable (fail-closed)", err: unavailable, want: retry, is: []error{jobguard.ErrGuardUnavailable}},
		{name: "snooze", err: ownSnooze, want: retry, is: []error{ownSnooze}},
		{name: "refused save", err: terminal, want: cancel, is: []error{jobguard.ErrJobTerminal}},
		{name: "reclaimed at start", err: reclaimed, want: cancel, is: []error{jobguard.ErrReclaimed}},
		{name: "invalid id", err: &NoRowError{Key: "job_id", Found: "no key"}, want: cancel, is: []error{jobguard.ErrInvalidJobID}},
		{name: "the worker's own cancel", err: ownCancel, want: cancel, is: []error{ownCancel}},
		{name: "lost, the call's context error", err: context.Canceled, lost: lost, want: cancel, is: []error{lost, context.Canceled}},
		{name: "lost, the worker returned nil", lost: lost, want: cancel, is: []error{lost}},
		{name: "lost, the worker snoozed", err: ownSnooze, lost: lost, want: cancel, is: []error{lost}},
		{name: "lost to a rescue, the save says so", err: fmt.Errorf("save: %w", errors.Join(jobguard.ErrJobTerminal, jobguard.ErrRequeued)),
			want: snooze},
		{name: "lost to a rescue, the row says so", lost: lost, requeued: true, want: snooze},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			v, err, why := decide(c.err, c.lost, func() bool { return c.requeued })
			if c.want == snooze {
				var snoozed *river.JobSnoozeError
				require.ErrorAs(t, err, &snoozed)
				require.Zero(t, snoozed.Duration, "River makes the job available at once")
				require.ErrorIs(t, why, jobguard.ErrRequeued)
			}
			require.Equal(t, c.want.String(), v.String())
			var cancelled *river.JobCancelError
			require.Equal(t, c.want == cancel, errors.As(err, &cancelled), "JobCancel exactly when cancelled: %v", err)
			if c.want == done {
				require.NoError(t, err)
			}
			for _, target := range c.is {
				require.ErrorIs(t, err, target)
			}
			if c.want == retry {
				require.Same(t, c.err, err, "a retried error reaches River as it came")
			}
		})
	}
}

// TestDecide_LostWinsOverTheWorkersOwnWord: an execution that lost its job
// is reported as lost, and never retried, whatever the worker returned
// meanwhile. Its own word to River (a snooze, a cancel) is overruled: River
// looks for a snooze before a cancel, so the answer carries the word only
// as text. asynqguard's decide holds the same cases.
func TestDecide_LostWinsOverTheWorkersOwnWord(t *testing.T) {
	t.Parallel()
	lost := &watch.LostError{JobID: "j", Generation: 2, Via: watch.ViaNotice, Seen: 2}
	own := errors.New("the course was deleted")
	for _, c := range []struct {
		name string
		err  error
		word bool // the worker's own word to River
	}{
		{"its own cancel", river.JobCancel(own), true},
		{"its own snooze", river.JobSnooze(time.Minute), true},
		{"a permanent error", fmt.Errorf("%w: %w", own, jobguard.ErrJobTerminal), false},
		{"an ordinary error", own, false},
		{"its context's error", fmt.Errorf("model call: %w", context.Canceled), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			v, got, _ := decide(c.err, lost, nil)
			require.Equal(t, cancel.String(), v.String())
			var reported *watch.LostError
			require.ErrorAs(t, got, &reported, "the loss is what River records")
			require.ErrorAs(t, got, new(*river.JobCancelError))
			require.False(t, errors.As(got, new(*river.JobSnoozeError)), "River would snooze the lost job: %v", got)
			require.ErrorContains(t, got, c.err.Error(), "the worker's error is told")
			if !c.word {
				require.ErrorIs(t, got, c.err, "the worker's error is kept")
			}
		})
	}
}
