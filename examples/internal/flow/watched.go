package flow

import (
	"context"
	"errors"

	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

// watched returns the context to run exec's external calls under: w
// cancels it, with a *watch.LostError cause, as soon as exec loses its
// job. Call release when the execution ends. Without a watcher (w nil) it
// returns ctx itself.
func watched(ctx context.Context, w *watch.Watcher, exec jobguard.Execution) (_ context.Context, release func()) {
	if w == nil {
		return ctx, func() {}
	}
	wctx, cancel := w.Watch(ctx, exec)
	return wctx, cancel
}

// reclaimed returns the *watch.LostError that cancelled ctx, or nil
// when ctx was not cancelled because its execution lost the job.
func reclaimed(ctx context.Context) *watch.LostError {
	var lost *watch.LostError
	if errors.As(context.Cause(ctx), &lost) {
		return lost
	}
	return nil
}
