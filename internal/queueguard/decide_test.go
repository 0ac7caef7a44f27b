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
	for _, c := range []struct {
		name       string
		err, cause error
		want       queueguard.Outcome
		text       string // the error told, when it is not err itself
		is, isNot  []error
	}{
		{name: "success", want: queueguard.Done},
		{name: "success under the queue's cancelled context", cause: context.Canceled, want: queueguard.Done},
		{name: "ordinary error", err: ordinary, want: queueguard.AsIs},
		{name: "the queue's deadline", err: context.DeadlineExceeded, cause: context.DeadlineExceeded, want: queueguard.AsIs},
		{name: "unavailable guard", err: jobguard.ErrGuardUnavailable, want: queueguard.AsIs},
		{name: "refused save", err: terminal, want: queueguard.Final},
		{name: "invalid id", err: &queueguard.NoRowError{Found: "no key"}, want: queueguard.Final},
		{name: "the worker's own word", err: ownWord, want: queueguard.AsIs},
		{name: "the worker's own word around a permanent error", err: permanentWord, want: queueguard.AsIs},
		{name: "cancelled at start", err: refusedCancelled, want: queueguard.Final, is: []error{jobguard.ErrCancelled}},
		{name: "cancelled while running", err: fmt.Errorf("model call: %w", context.Canceled), cause: cancelled, want: queueguard.Final,
			text: cancelled.Error() + "; the worker returned: model call: context canceled", is: []error{cancelled, jobguard.ErrCancelled}},
		{name: "lost, nil", cause: lost, want: queueguard.Final, text: lost.Error(), is: []error{lost}},
		{name: "lost, the cause handed back", err: lost, cause: lost, want: queueguard.Final, text: lost.Error(), is: []error{lost}},
		{name: "lost, the context's error", err: fmt.Errorf("model call: %w", context.Canceled), cause: lost, want: queueguard.Final,
			text: lost.Error() + "; the worker returned: model call: context canceled", is: []error{lost, context.Canceled}},
		{name: "lost, a permanent error", err: terminal, cause: lost, want: queueguard.Final, is: []error{lost, jobguard.ErrJobTerminal}},
		{name: "lost, the worker's own word is text only", err: ownWord, cause: lost, want: queueguard.Final,
			text: lost.Error() + "; the worker returned: the course was deleted: the queue's word", is: []error{lost}, isNot: []error{errWord}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := queueguard.Decide(c.err, c.cause, word)
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
