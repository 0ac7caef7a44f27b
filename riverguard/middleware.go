package riverguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/jobguard/jobguard/internal/queueguard"
	"github.com/jobguard/jobguard/internal/safe"
	"github.com/jobguard/jobguard/internal/txstate"
	"github.com/jobguard/jobguard/jobguard"
	"github.com/jobguard/jobguard/reclaim/riversource"
	"github.com/jobguard/jobguard/watch"
)

// Config configures a Middleware.
type Config struct {
	// StartGuard starts every guarded job as a new execution, and refuses
	// a job that was reclaimed or is already finished. Required.
	StartGuard *jobguard.StartGuard
	// DB is where the start is written, such as the *pgxpool.Pool the River
	// client uses. Not a pgx.Tx: the start must have committed before the
	// worker runs, for the watcher's check and for the worker's own save to
	// see it. Required.
	DB jobguard.DB
	// Watcher, when set, watches every execution while its worker runs: the
	// worker's context is cancelled as soon as the execution loses its job
	// (a reclaim notice, a failed heartbeat reported with Lost, or the
	// watcher's periodic check), and River cancels the job (or snoozes it,
	// when the job went back to the queue for another attempt). Its Run must be
	// running. Defaults to nil: the worker runs under River's context, and
	// only its refused save tells it the job was lost.
	Watcher *watch.Watcher
	// RowIDKey is the top-level key of a job's args that holds the id of the
	// job's row in the jobs table, as a JSON string or integer; set it as in
	// the reclaimer's riversource.Config. Defaults to
	// riversource.RowIDKeyDefault ("job_id").
	RowIDKey string
	// Kinds, when set, limits the middleware to River jobs of these kinds;
	// a job of another kind is worked as if the middleware were not there.
	// Set it when the middleware is installed on the whole client and some
	// kinds have no row in the jobs table (their args would otherwise be
	// refused). Defaults to nil: every job the middleware sees is guarded.
	Kinds []string
	// Logger receives a line for every job the middleware has River cancel
	// (info: a refusal is the guards working, not a fault), since River logs
	// a cancellation only at debug. Defaults to slog.Default().
	Logger *slog.Logger
}

// Middleware is a River worker middleware that runs each job as an
// execution of its row in the jobs table, started through the start guard,
// and has River cancel, rather than retry, a job the guards refused. Create
// it with New and install it in river.Config.Middleware, or return it from
// a worker's Middleware method. It is safe for concurrent use.
type Middleware struct {
	river.MiddlewareDefaults

	starts  *jobguard.StartGuard
	db      jobguard.DB
	watcher *watch.Watcher
	key     string
	kinds   map[string]struct{} // nil: every kind
	log     *slog.Logger
}

var _ rivertype.WorkerMiddleware = (*Middleware)(nil)

// New validates cfg and returns the middleware.
func New(cfg Config) (*Middleware, error) {
	switch {
	case cfg.StartGuard == nil:
		return nil, errors.New("riverguard: new: StartGuard is nil")
	case cfg.DB == nil:
		return nil, errors.New("riverguard: new: DB is nil")
	}
	if st := txstate.Of(cfg.DB); st != txstate.Own {
		return nil, fmt.Errorf("riverguard: new: DB is %v; the start must commit before the worker runs, so pass a pool: %w",
			st, jobguard.ErrInTransaction)
	}
	if cfg.RowIDKey == "" {
		cfg.RowIDKey = riversource.RowIDKeyDefault
	}
	if strings.IndexByte(cfg.RowIDKey, 0) >= 0 {
		// riversource refuses it too: Postgres text cannot hold it.
		return nil, fmt.Errorf("riverguard: new: RowIDKey %q contains a NUL byte", cfg.RowIDKey)
	}
	var kinds map[string]struct{}
	for i, k := range cfg.Kinds {
		if k == "" {
			return nil, fmt.Errorf("riverguard: new: Kinds[%d] is empty", i)
		}
		if kinds == nil {
			kinds = make(map[string]struct{}, len(cfg.Kinds))
		}
		kinds[k] = struct{}{}
	}
	// The logger is the caller's code, called right after the state
	// changes it reports: its panic must not undo them.
	cfg.Logger = safe.Logger(cfg.Logger)
	return &Middleware{starts: cfg.StartGuard, db: cfg.DB, watcher: cfg.Watcher,
		key: cfg.RowIDKey, kinds: kinds, log: cfg.Logger}, nil
}

// Work runs one delivery of job: it reads the row id from the job's args,
// starts the row as a new execution, runs the worker (doInner) under a
// context that carries the execution (see Execution) and, with a Watcher,
// is cancelled when the execution loses its job, and tells River the
// outcome. A permanent refusal, from the start or from the worker, and a
// lost execution become river.JobCancel, but a loss to another attempt
// (jobguard.ErrRequeued: the row waits QUEUED) becomes river.JobSnooze(0);
// any other error is returned as it came, and River retries it. A job the start refused never reaches the
// worker.
func (m *Middleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	if !m.guards(job.Kind) {
		return doInner(ctx)
	}
	exec, err := m.start(ctx, job)
	if err != nil {
		return m.answer(ctx, job, exec, err, nil, nil)
	}
	lost, err := m.run(withExecution(ctx, exec), exec, doInner)
	return m.answer(ctx, job, exec, err, lost, func() bool { return m.requeued(ctx, exec) })
}

// requeuedTimeout bounds the read of a lost execution's row.
const requeuedTimeout = 10 * time.Second

// requeued reports whether exec's row is QUEUED again for another attempt.
// A read that fails says yes: a delivery too many is refused by the start
// guard, while a job cancelled for good in River would leave a QUEUED row
// with nothing to run it.
func (m *Middleware) requeued(ctx context.Context, exec jobguard.Execution) bool {
	// River's context may have ended (a stop, a job timeout): the answer
	// is still owed.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requeuedTimeout)
	defer cancel()
	again, err := m.starts.Requeued(ctx, m.db, exec)
	if err != nil {
		m.log.WarnContext(ctx, "riverguard: could not read whether a lost job is back in the queue; River runs it again",
			slog.String("job_id", exec.JobID), slog.Int64("generation", exec.Generation), slog.Any("error", err))
		return true
	}
	return again
}

// guards reports whether jobs of kind are guarded.
func (m *Middleware) guards(kind string) bool {
	if m.kinds == nil {
		return true
	}
	_, ok := m.kinds[kind]
	return ok
}

// start reads the row id and starts the execution.
func (m *Middleware) start(ctx context.Context, job *rivertype.JobRow) (jobguard.Execution, error) {
	id, err := rowID(job.EncodedArgs, m.key)
	if err != nil {
		var nr *NoRowError
		if errors.As(err, &nr) {
			nr.RiverJobID = job.ID
		}
		return jobguard.Execution{}, err
	}
	exec, err := m.starts.Start(ctx, m.db, id)
	if err != nil {
		return jobguard.Execution{JobID: id}, fmt.Errorf("riverguard: river job %d: %w", job.ID, err)
	}
	return exec, nil
}

// run runs the worker under exec, watched when there is a watcher, and
// returns the watcher's cause when the execution lost its job meanwhile,
// and the worker's error. The watch is released even if the worker panics;
// a worker that panics after its job was lost is told as lost (queueguard.Run).
func (m *Middleware) run(ctx context.Context, exec jobguard.Execution, doInner func(context.Context) error) (*watch.LostError, error) {
	if m.watcher == nil {
		return nil, doInner(ctx)
	}
	runCtx, release := m.watcher.Watch(ctx, exec)
	defer release()
	return queueguard.Run(runCtx, doInner)
}

// answer decides what River is told and logs a cancellation or a snooze.
func (m *Middleware) answer(ctx context.Context, job *rivertype.JobRow, exec jobguard.Execution, err error,
	lost *watch.LostError, requeued func() bool) error {
	v, told, why := decide(err, lost, requeued)
	if v != cancel && v != snooze {
		return told
	}
	attrs := []any{slog.Int64("river_job_id", job.ID), slog.String("kind", job.Kind),
		slog.Int("attempt", job.Attempt), slog.Any("error", why)}
	if exec.JobID != "" {
		attrs = append(attrs, slog.String("job_id", exec.JobID))
	}
	if exec.Generation != 0 {
		attrs = append(attrs, slog.Int64("generation", exec.Generation))
	}
	if v == snooze {
		m.log.InfoContext(ctx, "riverguard: execution lost its job to another attempt; River runs the job again", attrs...)
	} else {
		m.log.InfoContext(ctx, "riverguard: job refused by the guards; River cancels it", attrs...)
	}
	return told
}
