package queueguard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/queueguard"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

// errWord stands for a queue's own word (a River snooze, an asynq
// RevokeTask).
var errWord = errors.New("the queue's word")

func word(err error) bool { return errors.Is(err, errWord) }

func TestDecide(t *testing.T) {
	t.Parallel()
	lost := &watch.LostError{JobID: "j", Generation: 2, Via: watch.ViaNotice, Seen: 2}
	cancelled := &watch.LostError{JobID: "j", Generation: 2, Via: watch.ViaNotice, Seen: 2, Cancelled: true}
	refusedCancelled := &jobguard.CancelledError{JobID: "j", Reason: jobguard.CancelledReasonDefault}
	ordinary := errors.New("model call: 503")
	terminal := fmt.Errorf("save: %w", jobguard.ErrJobTerminal)
	ownWord := fmt.Errorf("the course was deleted: %w", errWord)
	permanentWord := fmt.Errorf("%w: %w", terminal, errWord)
	// requeuedSave is a save refused because the row went back to QUEUED
	// under a newer generation (a rescue), as jobguard explains it.
	requeuedSave := fmt.Errorf("save: %w", jobguard.ErrRequeued)
	requeuedSave = errors.Join(requeuedSave, jobguard.ErrJobTerminal)
	requeuedLost := &watch.LostError{JobID: "j", Generation: 2, Via: watch.ViaCheck, Seen: 3, Status: "QUEUED", Requeued: true}
	for _, c := range []struct {
		name       string
		err, cause error
		requeued   bool // what the row reads, when asked
		asked      bool // whether the row is read
		want       queueguard.Outcome
		text       string // the error told, when it is not err itself
		is, isNot  []error
	}{
		{name: "success", want: queueguard.Done},
		{name: "success under the queue's cancelled context", cause: context.Canceled, want: queueguard.Done},
		{name: "ordinary error", err: ordinary, want: queueguard.AsIs},
		{name: "the queue's deadline", err: context.DeadlineExceeded, cause: context.DeadlineExceeded, want: queueguard.AsIs},
		{name: "unavailable guard", err: jobguard.ErrGuardUnavailable, want: queueguard.AsIs},
		{name: "refused save", asked: true, err: terminal, want: queueguard.Final},
		{name: "invalid id", err: &queueguard.NoRowError{Found: "no key"}, want: queueguard.Final},
		{name: "the worker's own word", err: ownWord, want: queueguard.AsIs},
		{name: "the worker's own word around a permanent error", err: permanentWord, want: queueguard.AsIs},
		{name: "cancelled at start", err: refusedCancelled, want: queueguard.Final, is: []error{jobguard.ErrCancelled}},
		{name: "cancelled while running", err: fmt.Errorf("model call: %w", context.Canceled), cause: cancelled, want: queueguard.Final,
			text: cancelled.Error() + "; the worker returned: model call: context canceled", is: []error{cancelled, jobguard.ErrCancelled}},
		{name: "lost, nil", asked: true, cause: lost, want: queueguard.Final, text: lost.Error(), is: []error{lost}},
		{name: "lost, the cause handed back", asked: true, err: lost, cause: lost, want: queueguard.Final, text: lost.Error(), is: []error{lost}},
		{name: "lost, the context's error", asked: true, err: fmt.Errorf("model call: %w", context.Canceled), cause: lost, want: queueguard.Final,
			text: lost.Error() + "; the worker returned: model call: context canceled", is: []error{lost, context.Canceled}},
		{name: "lost, a permanent error", asked: true, err: terminal, cause: lost, want: queueguard.Final, is: []error{lost, jobguard.ErrJobTerminal}},
		{name: "lost, the worker's own word is text only", asked: true, err: ownWord, cause: lost, want: queueguard.Final,
			text: lost.Error() + "; the worker returned: the course was deleted: the queue's word", is: []error{lost}, isNot: []error{errWord}},
		{name: "lost to a rescue: the save says so", err: requeuedSave, want: queueguard.Again, is: []error{jobguard.ErrRequeued}},
		{name: "lost to a rescue: the save says so, the row is not read", err: requeuedSave, requeued: false, want: queueguard.Again,
			is: []error{jobguard.ErrRequeued}},
		{name: "lost to a rescue: a refused save that does not say, the row does", err: terminal, requeued: true, asked: true,
			want: queueguard.Again, is: []error{jobguard.ErrRequeued, jobguard.ErrJobTerminal}},
		{name: "refused save, the row is not back in the queue", err: terminal, asked: true, want: queueguard.Final},
		{name: "lost to a rescue: the notice does not say, the row does", err: fmt.Errorf("model call: %w", context.Canceled), cause: lost,
			requeued: true, asked: true, want: queueguard.Again,
			text: lost.Error() + "; the worker returned: model call: context canceled (" + jobguard.ErrRequeued.Error() + ")",
			is:   []error{lost, jobguard.ErrRequeued, context.Canceled}},
		{name: "lost to a rescue: the check says so", cause: requeuedLost, want: queueguard.Again, text: requeuedLost.Error(),
			is: []error{jobguard.ErrRequeued}},
		{name: "lost to a rescue: the worker's own word is text only", err: ownWord, cause: lost, requeued: true, asked: true,
			want: queueguard.Again, text: lost.Error() + "; the worker returned: the course was deleted: the queue's word (" +
				jobguard.ErrRequeued.Error() + ")", is: []error{lost, jobguard.ErrRequeued}, isNot: []error{errWord}},
		{name: "lost, the row is not back in the queue", cause: lost, asked: true, want: queueguard.Final, text: lost.Error()},
		{name: "a cancel stays final whatever the row reads", cause: cancelled, requeued: true, want: queueguard.Final,
			text: cancelled.Error(), is: []error{jobguard.ErrCancelled}},
		{name: "a reclaim's refusal at start stays final", err: &jobguard.ReclaimedError{JobID: "j", Source: "database"}, requeued: true,
			want: queueguard.Final, is: []error{jobguard.ErrReclaimed}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			asked := false
			requeued := func() bool { asked = true; return c.requeued }
			d := queueguard.Decide(c.err, c.cause, word, requeued)
			require.Equal(t, c.asked, asked, "whether the row was read")
			require.Equal(t, c.want.String(), d.Outcome.String())
			switch {
			case c.want == queueguard.Done:
				require.NoError(t, d.Err)
			case c.text != "":
				require.EqualError(t, d.Err, c.text)
			default:
				require.ErrorIs(t, d.Err, c.err)
			}
			if c.want == queueguard.AsIs {
				require.Equal(t, c.err, d.Err, "the queue gets the error as it came")
			}
			require.Equal(t, errors.As(c.cause, new(*watch.LostError)), d.Lost != nil)
			for _, target := range c.is {
				require.ErrorIs(t, d.Err, target)
			}
			for _, target := range c.isNot {
				require.NotErrorIs(t, d.Err, target)
			}
		})
	}
}
