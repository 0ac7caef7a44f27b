package asynqguard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/queueguard"
	"github.com/jobguard/jobguard/internal/txstate"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/watch"
)

// PayloadKeyDefault is the payload key that names a task's row, the same
// key riversource.RowIDKeyDefault reads from River's job args.
const PayloadKeyDefault = "job_id"

// IDSource says where a task names the row of its job.
type IDSource int

const (
	// IDFromPayload reads the row id from a top-level key of the task's
	// JSON payload (Config.PayloadKey): a string, or an integer for an
	// integer id column.
	IDFromPayload IDSource = iota
	// IDFromTaskID takes the task's id (asynq.GetTaskID) as the row id:
	// enqueue the task with asynq.TaskID(rowID). asynq refuses a second task
	// with the same id in the queue while the first is kept, so one task
	// stands for one row.
	IDFromTaskID
)

// String returns the constant's name.
func (s IDSource) String() string {
	switch s {
	case IDFromPayload:
		return "IDFromPayload"
	case IDFromTaskID:
		return "IDFromTaskID"
	default:
		return fmt.Sprintf("IDSource(%d)", int(s))
	}
}

// Config configures the middleware.
type Config struct {
	// StartGuard starts each task's execution, and refuses jobs that were
	// reclaimed. Its lookup policy (StartGuardConfig.OnLookupError) decides
	// whether a task waits for Redis (FailClosed: asynq retries it) or runs
	// on the database's evidence alone (FailOpen). Required.
	StartGuard *jobguard.StartGuard
	// DB is where Start runs: a *pgxpool.Pool, since asynq runs handlers
	// concurrently and each start must commit before its handler runs (a
	// pgx.Tx is refused). Required.
	DB jobguard.DB
	// IDFrom says where a task names its row. Defaults to IDFromPayload.
	IDFrom IDSource
	// PayloadKey is the top-level key of the JSON payload that holds the
	// row id, with IDFromPayload; leave it empty with IDFromTaskID. Defaults
	// to PayloadKeyDefault ("job_id").
	PayloadKey string
	// Watcher, when set, runs each handler under a context that it cancels
	// as soon as the execution lost its job (a reclaim notice, the
	// watcher's periodic check), and the middleware releases the execution
	// when the handler returns. Run the watcher (Watcher.Run) in the same
	// process, and take tasks once Watcher.Ready is closed. Defaults to nil:
	// the handler runs under asynq's context.
	Watcher *watch.Watcher
}

// middleware is a validated Config.
type middleware struct {
	cfg Config
}

// New validates cfg and returns the middleware, for asynq.ServeMux's Use
// or around a single handler. An error names the field that is wrong.
func New(cfg Config) (asynq.MiddlewareFunc, error) {
	if cfg.StartGuard == nil {
		return nil, errors.New("asynqguard: new: StartGuard is nil")
	}
	if cfg.DB == nil {
		return nil, errors.New("asynqguard: new: DB is nil")
	}
	if st := txstate.Of(cfg.DB); st != txstate.Own {
		return nil, fmt.Errorf("asynqguard: new: DB is %v; each task's start must commit on its own, before its handler runs: give a pool: %w",
			st, jobguard.ErrInTransaction)
	}
	switch cfg.IDFrom {
	case IDFromPayload:
		if cfg.PayloadKey == "" {
			cfg.PayloadKey = PayloadKeyDefault
		}
	case IDFromTaskID:
		if cfg.PayloadKey != "" {
			return nil, fmt.Errorf("asynqguard: new: PayloadKey %q is set, but IDFrom is IDFromTaskID, which reads no payload", cfg.PayloadKey)
		}
	default:
		return nil, fmt.Errorf("asynqguard: new: IDFrom %d is not an IDSource", int(cfg.IDFrom))
	}
	m := &middleware{cfg: cfg}
	return m.wrap, nil
}

// wrap is the asynq.MiddlewareFunc.
func (m *middleware) wrap(h asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		return m.process(ctx, t, h)
	})
}

// process runs one delivery: find the row, start the execution, run the
// handler under it, and tell asynq what became of it.
func (m *middleware) process(ctx context.Context, t *asynq.Task, h asynq.Handler) error {
	jobID, err := m.jobID(ctx, t)
	if err != nil {
		return told(fmt.Errorf("asynqguard: %s: %w", describe(ctx, t), err), nil)
	}
	exec, err := m.cfg.StartGuard.Start(ctx, m.cfg.DB, jobID)
	if err != nil {
		return told(fmt.Errorf("asynqguard: %s: %w", describe(ctx, t), err), nil)
	}
	run := func(ctx context.Context) error { return h.ProcessTask(context.WithValue(ctx, execKey{}, exec), t) }
	requeued := func() bool { return m.requeued(ctx, exec) }
	if m.cfg.Watcher == nil {
		_, err := answer(run(ctx), nil, requeued)
		return err
	}
	runCtx, release := m.cfg.Watcher.Watch(ctx, exec)
	defer release()
	// A handler that panics after its job was lost is told as lost.
	lost, err := queueguard.Run(runCtx, run)
	var cause error
	if lost != nil {
		cause = lost
	}
	_, err = answer(err, cause, requeued)
	return err
}

// requeuedTimeout bounds the read of a lost execution's row.
const requeuedTimeout = 10 * time.Second

// requeued reports whether exec's row is QUEUED again for another attempt.
// A read that fails says yes: a delivery too many is refused by the start
// guard, while an archived task would leave a QUEUED row with nothing to
// run it.
func (m *middleware) requeued(ctx context.Context, exec jobguard.Execution) bool {
	// asynq's context may have ended (its deadline, a shutdown): the
	// answer is still owed.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requeuedTimeout)
	defer cancel()
	again, err := m.cfg.StartGuard.Requeued(ctx, m.cfg.DB, exec)
	return err != nil || again
}

// jobID is the row id the task names.
func (m *middleware) jobID(ctx context.Context, t *asynq.Task) (string, error) {
	if m.cfg.IDFrom == IDFromTaskID {
		id, ok := asynq.GetTaskID(ctx)
		if !ok {
			return "", fmt.Errorf("%w: the context carries no asynq task id", jobguard.ErrInvalidJobID)
		}
		return id, nil
	}
	return payloadID(t.Payload(), m.cfg.PayloadKey)
}

// describe names a task in errors: its id, when asynq runs it, and type.
func describe(ctx context.Context, t *asynq.Task) string {
	if id, ok := asynq.GetTaskID(ctx); ok {
		return fmt.Sprintf("task %s (%s)", id, t.Type())
	}
	return fmt.Sprintf("task (%s)", t.Type())
}

// execKey is the context key of the execution.
type execKey struct{}

// Execution returns the execution the middleware started for the task that
// ctx belongs to, and false outside the middleware. Its handler saves with
// it (jobguard's CompleteTx, Finalize) and beats with it (package
// heartbeat).
func Execution(ctx context.Context) (jobguard.Execution, bool) {
	exec, ok := ctx.Value(execKey{}).(jobguard.Execution)
	return exec, ok
}
