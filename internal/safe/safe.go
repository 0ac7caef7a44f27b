// Package safe runs code that a background loop of the library was handed
// (a handler, a rule, a compensator, a notifier, a hook) so that a panic in
// it fails that one call, as an error, instead of the process. A panic in a
// goroutine that no caller owns cannot be recovered by anyone else: the
// loops call through here, and every site turns the error into its item's
// ordinary failure (counted, logged, retried after its backoff).
//
// Call and Bounded run the code in a goroutine of their own, so that a
// runtime.Goexit in it (a test's t.FailNow, a log.Fatal-like helper) ends
// only that goroutine and is reported too, rather than read as success or
// taking the loop's goroutine with it.
package safe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"
)

// PanicError is a panic recovered from code the library was handed. Its
// Error method prints the panic's value, never the stack, so that it fits a
// record's error column or a log attribute; the stack is in Stack.
type PanicError struct {
	// Value is what the code passed to panic, or ErrGoexit when it called
	// runtime.Goexit.
	Value any
	// Stack is the stack of the goroutine that panicked, taken where the
	// panic was recovered (the panicking frames are on it).
	Stack []byte
}

// Error returns "panic: " and the value.
func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap returns the panic's value when it is an error (panic(err), or
// ErrGoexit), so that errors.Is sees through a PanicError.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// Grace is how long the library waits, once the context of code it runs
// under a deadline has ended, before it abandons that code (Bounded's
// grace): long enough for code that honours its context to return its own
// error (a query's cancel is a round trip), short beside the deadlines.
const Grace = time.Second

// ErrGoexit is the Value of a PanicError whose code called runtime.Goexit
// instead of returning.
var ErrGoexit = errors.New("runtime.Goexit called")

// ErrAbandoned is returned, wrapped with the context's cause, by Bounded
// when the code was still running after its context ended and the grace
// that followed: it was left to finish on its own.
var ErrAbandoned = errors.New("still running after its context ended; abandoned")

// Call runs fn in a goroutine of its own, waits for it, and returns its
// error, or a *PanicError when fn panicked or called runtime.Goexit.
func Call(fn func() error) error {
	done := make(chan error, 1)
	go run(done, fn)
	return <-done
}

// Bounded runs fn(ctx) as Call does, but waits for it only until ctx has
// ended and grace has passed since: fn is then left running, what it
// returns later is dropped, and Bounded returns an error wrapping
// ErrAbandoned and context.Cause(ctx). Use it only where fn shares nothing
// with the caller that the caller goes on to use (not a transaction): fn
// may still be running when Bounded returns.
func Bounded(ctx context.Context, grace time.Duration, fn func(context.Context) error) error {
	done := make(chan error, 1) // buffered: an abandoned fn does not block on it
	go run(done, func() error { return fn(ctx) })
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("%w %v later: %w", ErrAbandoned, grace, context.Cause(ctx))
	}
}

// run sends fn's outcome on done, whatever way fn leaves.
func run(done chan<- error, fn func() error) {
	returned := false
	defer func() {
		if p := recover(); p != nil {
			done <- &PanicError{Value: p, Stack: debug.Stack()}
		} else if !returned {
			done <- &PanicError{Value: ErrGoexit, Stack: debug.Stack()}
		}
	}()
	err := fn()
	returned = true
	done <- err
}

// AsPanic returns the first *PanicError that err wraps, or nil.
func AsPanic(err error) *PanicError {
	var pe *PanicError
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}

// Attrs returns the log attributes of the first panic that one of errs
// wraps: "panic" (its value) and "stack". It returns nil when none does.
func Attrs(errs ...error) []slog.Attr {
	for _, err := range errs {
		if pe := AsPanic(err); pe != nil {
			return []slog.Attr{slog.String("panic", fmt.Sprint(pe.Value)), slog.String("stack", string(pe.Stack))}
		}
	}
	return nil
}

// Recovered logs, at error level, that a loop recovered from a panic that
// err wraps, with its stack, and does nothing when err wraps none. It is
// the loops' last line of defence, for a panic outside the code they call
// item by item (a logger's or a meter's, or a bug of the library's own), so
// a logger that panics too is ignored: the loop must go on.
func Recovered(ctx context.Context, log *slog.Logger, msg string, err error, attrs ...slog.Attr) {
	if AsPanic(err) == nil {
		return
	}
	attrs = append(attrs, slog.String("error", err.Error()))
	attrs = append(attrs, Attrs(err)...)
	_ = Call(func() error {
		log.LogAttrs(ctx, slog.LevelError, msg, attrs...)
		return nil
	})
}
