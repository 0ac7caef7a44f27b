package queueguard

import (
	"context"
	"errors"

	"github.com/jobguard/jobguard/internal/safe"
	"github.com/jobguard/jobguard/watch"
)

// Run runs a watched worker (fn, under runCtx, the context its watcher
// gave it) and returns its error and the watcher's cause when the
// execution lost its job meanwhile. A worker that panics after its job was
// lost returns the panic as its error (a *safe.PanicError), so the loss is
// told to the queue as final like any other lost attempt's answer; a panic
// while the job is still the execution's goes on to the queue as it came,
// which handles it as it handles any panicking worker.
func Run(runCtx context.Context, fn func(context.Context) error) (*watch.LostError, error) {
	err := safe.Call(func() error { return fn(runCtx) })
	// Read before the caller releases the watch, which cancels runCtx with
	// a cause of its own.
	var lost *watch.LostError
	errors.As(context.Cause(runCtx), &lost)
	if pe := safe.AsPanic(err); pe != nil && lost == nil && pe.Value != safe.ErrGoexit {
		panic(pe.Value)
	}
	return lost, err
}
