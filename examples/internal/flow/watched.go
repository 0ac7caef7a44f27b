package flow

import (
	"context"
	"errors"
	"fmt"

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

// ErrGaveUp marks the error of a delivery whose processor failed its job
// itself (a broken call, an unreadable parent): the job is FAILED, so a
// queue must not retry the delivery, whose retry the start guard would
// only refuse. A River worker returns river.JobCancel for it.
var ErrGaveUp = errors.New("the processor failed its job")

// giveUp fails exec's job with reason and returns err marked ErrGaveUp;
// if the job could not be failed (the execution lost it meanwhile, the
// database is unreachable), both errors, unmarked, as a queue sees them.
func giveUp(ctx context.Context, g *jobguard.Guard, db jobguard.DB, exec jobguard.Execution, err error, reason string) error {
	if ferr := g.Fail(ctx, db, exec, reason); ferr != nil {
		return errors.Join(err, ferr)
	}
	return fmt.Errorf("%w (%w)", err, ErrGaveUp)
}
