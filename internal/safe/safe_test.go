package safe_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobguard/jobguard/internal/safe"
)

func TestCall_ReturnsTheFunctionsError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	require.NoError(t, safe.Call(func() error { return nil }))
	require.Same(t, boom, safe.Call(func() error { return boom }))
}

func TestCall_PanicBecomesAPanicErrorWithValueAndStack(t *testing.T) {
	t.Parallel()
	err := safe.Call(func() error { panicHere("boom"); return nil })
	var pe *safe.PanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "boom", pe.Value)
	require.Equal(t, "panic: boom", err.Error(), "the stack stays out of the message")
	require.Contains(t, string(pe.Stack), "panicHere", "the stack shows the panicking frame")
}

func panicHere(v any) { panic(v) }

func TestCall_PanicWithAnErrorUnwrapsToIt(t *testing.T) {
	t.Parallel()
	err := safe.Call(func() error { panic(fs.ErrNotExist) })
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.NotNil(t, safe.AsPanic(err))
}

func TestCall_PanicWithNilIsStillAPanic(t *testing.T) {
	t.Parallel()
	err := safe.Call(func() error { panic(nil) })
	var pn *runtime.PanicNilError
	require.ErrorAs(t, err, &pn)
}

func TestCall_GoexitIsAFailureNotASuccess(t *testing.T) {
	t.Parallel()
	err := safe.Call(func() error { runtime.Goexit(); return nil })
	require.ErrorIs(t, err, safe.ErrGoexit)
	require.NotNil(t, safe.AsPanic(err))
}

func TestCall_RuntimeErrorIsRecovered(t *testing.T) {
	t.Parallel()
	var m map[string]int
	err := safe.Call(func() error { m["x"] = 1; return nil })
	var re runtime.Error
	require.ErrorAs(t, err, &re)
}

func TestBounded_AFunctionThatHonoursItsContextReturnsItsOwnError(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	own := errors.New("stopped as asked")
	err := safe.Bounded(ctx, time.Hour, func(ctx context.Context) error {
		<-ctx.Done()
		return own
	})
	require.Same(t, own, err)
}

func TestBounded_AFunctionThatIgnoresItsContextIsAbandoned(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	release := make(chan struct{})
	defer close(release)
	err := safe.Bounded(ctx, time.Millisecond, func(context.Context) error {
		<-release
		return nil
	})
	require.ErrorIs(t, err, safe.ErrAbandoned)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestBounded_AnAbandonedFunctionThatPanicsLaterHarmsNothing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	release, panicked := make(chan struct{}), make(chan struct{})
	err := safe.Bounded(ctx, 0, func(context.Context) error {
		<-release
		defer close(panicked)
		panic("late")
	})
	require.ErrorIs(t, err, safe.ErrAbandoned)
	close(release)
	<-panicked // the process is still here
}

func TestBounded_PanicIsAPanicError(t *testing.T) {
	t.Parallel()
	err := safe.Bounded(context.Background(), 0, func(context.Context) error { panic("boom") })
	require.NotNil(t, safe.AsPanic(err))
}

func TestAttrs_OnlyForAPanic(t *testing.T) {
	t.Parallel()
	require.Nil(t, safe.Attrs(nil, errors.New("plain")))
	pe := safe.Call(func() error { panic("boom") })
	attrs := safe.Attrs(errors.New("plain"), errors.Join(errors.New("other"), pe))
	require.Len(t, attrs, 2)
	require.Equal(t, "boom", attrs[0].Value.String())
	require.Contains(t, attrs[1].Value.String(), "goroutine")
}

func TestRecovered_LogsTheStackAndSurvivesAPanickingLogger(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	pe := safe.Call(func() error { panic("boom") })
	safe.Recovered(context.Background(), slog.New(slog.NewTextHandler(&buf, nil)), "loop: recovered", pe)
	require.Contains(t, buf.String(), "level=ERROR")
	require.Contains(t, buf.String(), "panic=boom")
	require.Contains(t, buf.String(), "goroutine")

	buf.Reset()
	safe.Recovered(context.Background(), slog.New(slog.NewTextHandler(&buf, nil)), "loop: recovered", errors.New("plain"))
	require.Empty(t, buf.String(), "an error that is no panic is the caller's to log")

	safe.Recovered(context.Background(), slog.New(panickingHandler{}), "loop: recovered", pe)
}

type panickingHandler struct{ slog.Handler }

func (panickingHandler) Enabled(context.Context, slog.Level) bool  { return true }
func (panickingHandler) Handle(context.Context, slog.Record) error { panic("the logger broke") }
