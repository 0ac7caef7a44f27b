package asynqguard

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	lost := &watch.LostError{JobID: "j", Generation: 2, Via: watch.ViaNotice, Seen: 2}
	reclaimed := &jobguard.ReclaimedError{JobID: "j", Source: "marker", Reason: "reclaimed"}
	terminal := fmt.Errorf("complete: %w", jobguard.ErrJobTerminal)
	plain := errors.New("model call: 503")
	for _, tc := range []struct {
		name       string
		err, cause error
		want       verdict
	}{
		{"success", nil, nil, asIs},
		{"success under asynq's cancelled context", nil, context.Canceled, asIs},
		{"ordinary error", plain, nil, asIs},
		{"asynq's deadline", context.DeadlineExceeded, context.DeadlineExceeded, asIs},
		{"unavailable guard", fmt.Errorf("start: %w", jobguard.ErrGuardUnavailable), nil, asIs},
		{"reclaimed at start", reclaimed, nil, refuse},
		{"refused save", terminal, nil, refuse},
		{"invalid id", fmt.Errorf("payload: %w", jobguard.ErrInvalidJobID), nil, refuse},
		{"lost, handler saw its context end", fmt.Errorf("model call: %w", context.Canceled), lost, refuse},
		{"lost, handler returned nil", nil, lost, refuse},
		{"lost, handler returned the cause", lost, lost, refuse},
		{"handler's own SkipRetry", fmt.Errorf("bad input: %w", asynq.SkipRetry), nil, asIs},
		{"handler's own RevokeTask", fmt.Errorf("%w: %w", terminal, asynq.RevokeTask), nil, asIs},
		{"handler's own RevokeTask, but lost", fmt.Errorf("%w: %w", terminal, asynq.RevokeTask), lost, refuse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, decide(tc.err, tc.cause))
		})
	}
}

func TestTold_RefusalSkipsRetryAndKeepsBothErrors(t *testing.T) {
	t.Parallel()
	lost := &watch.LostError{JobID: "j", Generation: 2, Via: watch.ViaNotice, Seen: 2}
	handler := fmt.Errorf("model call: %w", context.Canceled)

	err := told(handler, lost)
	require.ErrorIs(t, err, asynq.SkipRetry)
	require.ErrorIs(t, err, context.Canceled)
	var got *watch.LostError
	require.ErrorAs(t, err, &got)
	require.True(t, jobguard.IsPermanent(err))
	require.Equal(t, "watch: job j generation 2 was reclaimed (notice for generation 2); the worker returned: model call: context canceled (skip retry for the task)", err.Error())

	require.Equal(t, "watch: job j generation 2 was reclaimed (notice for generation 2) (skip retry for the task)", told(nil, lost).Error())
	require.Equal(t, "watch: job j generation 2 was reclaimed (notice for generation 2) (skip retry for the task)", told(lost, lost).Error())
}

func TestTold_RetryableErrorIsUntouched(t *testing.T) {
	t.Parallel()
	plain := errors.New("model call: 503")
	require.Same(t, plain, told(plain, nil))
	require.NoError(t, told(nil, nil))
}

// TestTold_LostWinsOverTheHandlersOwnWord: an execution that lost its job
// is reported as lost, and never retried, whatever the handler returned
// meanwhile. Its own word to asynq (SkipRetry, RevokeTask) is overruled:
// asynq looks for RevokeTask first, and would drop the task as done instead
// of archiving the loss, so the answer carries the word only as text.
// riverguard's decide holds the same cases.
func TestTold_LostWinsOverTheHandlersOwnWord(t *testing.T) {
	t.Parallel()
	lost := &watch.LostError{JobID: "j", Generation: 2, Via: watch.ViaNotice, Seen: 2}
	own := errors.New("the course was deleted")
	for _, c := range []struct {
		name string
		err  error
		word bool // the handler's own word to asynq
	}{
		{"its own SkipRetry", fmt.Errorf("%w: %w", own, asynq.SkipRetry), true},
		{"its own RevokeTask", fmt.Errorf("%w: %w", own, asynq.RevokeTask), true},
		{"a permanent error", fmt.Errorf("%w: %w", own, jobguard.ErrJobTerminal), false},
		{"an ordinary error", own, false},
		{"its context's error", fmt.Errorf("model call: %w", context.Canceled), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, refuse, decide(c.err, lost))
			got := told(c.err, lost)
			var reported *watch.LostError
			require.ErrorAs(t, got, &reported, "the loss is what asynq records")
			require.ErrorIs(t, got, asynq.SkipRetry)
			require.NotErrorIs(t, got, asynq.RevokeTask, "asynq would drop the lost task as done")
			require.ErrorContains(t, got, c.err.Error(), "the handler's error is told")
			if !c.word {
				require.ErrorIs(t, got, c.err, "the handler's error is kept")
			}
		})
	}
}
