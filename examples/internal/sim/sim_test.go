package sim

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestGate_HoldsUntilReleased(t *testing.T) {
	t.Parallel()
	g := NewGate()
	done := make(chan error, 1)
	go func() { done <- Call{Hang: g}.Do(context.Background()) }()
	<-g.Reached()
	select {
	case <-done:
		t.Fatal("the call passed a closed gate")
	case <-time.After(50 * time.Millisecond):
	}
	g.Release()
	g.Release() // safe twice
	require.NoError(t, <-done)
}

func TestGate_ContextEndsTheWait(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, Call{Hang: NewGate()}.Do(ctx), context.Canceled)
}

func TestHangFor_ReleasesItself(t *testing.T) {
	t.Parallel()
	start := time.Now()
	require.NoError(t, Call{Hang: HangFor(100 * time.Millisecond)}.Do(context.Background()))
	require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
}

func TestModel_GeneratesNumberedWeeks(t *testing.T) {
	t.Parallel()
	weeks, err := Model{}.Generate(context.Background(), "Go", 3, 2)
	require.NoError(t, err)
	require.Len(t, weeks, 2)
	require.Equal(t, "Go, week 4", weeks[1].Title)
	require.Len(t, weeks[1].Lessons, 2)
	require.Len(t, weeks[1].Lessons[0].Lectures, 2)
}

func TestEncoder_ReportsProgressThenHangsAtTheMux(t *testing.T) {
	t.Parallel()
	mux := NewGate()
	var seen []int
	type result struct {
		enc Encoded
		err error
	}
	done := make(chan result, 1)
	go func() {
		enc, err := Encoder{Steps: 4, Seconds: 30, Hang: mux}.Encode(context.Background(), io.Discard,
			func(p int) error { seen = append(seen, p); return nil })
		done <- result{enc, err}
	}()
	<-mux.Reached()
	require.Equal(t, []int{24, 49, 74, 99}, seen, "every chunk reported before the mux")
	mux.Release()
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, 30, r.enc.Seconds)
	require.Positive(t, r.enc.Bytes)
}

func TestEncoder_StopsWhenProgressSaysSo(t *testing.T) {
	t.Parallel()
	lost := errors.New("lost")
	calls := 0
	_, err := Encoder{Steps: 10}.Encode(context.Background(), io.Discard, func(int) error { calls++; return lost })
	require.ErrorIs(t, err, lost)
	require.Equal(t, 1, calls)
}

// Every simulated call returns as soon as its context ends, wherever it is:
// a hung model call, an encoder between chunks, a stalled mux.
func TestCalls_StopWhenTheirContextEnds(t *testing.T) {
	t.Parallel()
	cause := errors.New("reclaimed")
	cancelled := func() context.Context {
		ctx, cancel := context.WithCancelCause(context.Background())
		time.AfterFunc(20*time.Millisecond, func() { cancel(cause) })
		return ctx
	}
	start := time.Now()
	_, err := Model{Call: Call{Hang: NewGate()}}.Generate(cancelled(), "c", 1, 1)
	require.ErrorIs(t, err, context.Canceled)
	_, err = Model{Call: Call{Latency: time.Hour}}.Generate(cancelled(), "c", 1, 1)
	require.ErrorIs(t, err, context.Canceled)
	_, err = Encoder{Steps: 3, StepDelay: time.Hour}.Encode(cancelled(), io.Discard, func(int) error { return nil })
	require.ErrorIs(t, err, context.Canceled)
	_, err = Encoder{Steps: 1, Hang: NewGate()}.Encode(cancelled(), io.Discard, func(int) error { return nil })
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), 10*time.Second)
}
