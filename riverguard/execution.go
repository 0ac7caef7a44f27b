package riverguard

import (
	"context"

	"github.com/jobguard/jobguard/jobguard"
)

// executionKey is the context key of the execution the middleware started.
type executionKey struct{}

// Execution returns the execution the middleware started for the job being
// worked under ctx, and true; false when the middleware did not start one
// (the job's kind is not guarded, or the worker runs without the
// middleware). The worker saves under it:
//
//	exec, ok := riverguard.Execution(ctx)
//	err := guard.CompleteTx(ctx, pool, exec, save)
func Execution(ctx context.Context) (jobguard.Execution, bool) {
	exec, ok := ctx.Value(executionKey{}).(jobguard.Execution)
	return exec, ok
}

// withExecution returns ctx carrying exec for Execution.
func withExecution(ctx context.Context, exec jobguard.Execution) context.Context {
	return context.WithValue(ctx, executionKey{}, exec)
}
