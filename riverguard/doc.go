// Package riverguard runs River jobs under jobguard's guards: a River worker
// middleware that starts each job as an execution of its row in the jobs
// table, hands the execution to the worker, and turns every refusal of the
// guards into river.JobCancel, so River does not retry what can only be
// refused again.
//
// It is a module of its own (github.com/jobguard/jobguard/riverguard), so
// that River is a dependency only of the programs that import it.
//
// # What it guarantees
//
// For every job of a guarded kind, Middleware.Work:
//
//   - Names the row by a top-level key of the job's args (Config.RowIDKey,
//     "job_id" by default), a JSON string or integer, by the same rule as
//     the reclaimer's River source (reclaim/riversource): the row the
//     middleware starts is the row the reclaimer watches. Args that do not
//     name a row are refused with a *NoRowError, which is permanent.
//   - Starts the row with StartGuard.Start, on Config.DB, before the worker
//     runs: a new execution with its own generation, committed. A job the
//     start guard refuses (reclaimed, already FAILED or COMPLETED, no such
//     row, an id the id column cannot hold) never reaches the worker, and
//     River cancels it.
//   - Runs the worker under a context that carries the execution: Execution
//     returns it, and the worker's save is one guard.CompleteTx (or
//     Finalize) under it. A save refused because the job was reclaimed
//     meanwhile returns a permanent error, and River cancels the job: the
//     row stays FAILED, none of the save's rows exist, and River's job ends
//     'cancelled', not retried. A save refused because the job went back to
//     the queue for another attempt (a rescue of a worker that only looked
//     dead, an operator's Retry: jobguard.ErrRequeued) snoozes River's job
//     (JobSnooze(0)), which runs it again at once without using an attempt.
//   - With Config.Watcher, runs the worker under the watcher's context for
//     the execution, cancelled (with a *watch.LostError cause) as soon as
//     the execution loses its job, and released when the worker returns.
//     A lost execution is cancelled in River whatever the worker returned:
//     the context error of a call that stopped, even nil, or its own
//     river.JobSnooze or river.JobCancel, which the cancellation then
//     carries only as text (River would snooze a lost job otherwise).
//     asynqguard decides by the same rule.
//   - A loss to another attempt of the job is the exception: when the row
//     is QUEUED again under a newer generation (the reclaimer's rescue of
//     a worker whose lease lapsed and that came back, an operator's
//     Retry), the refused save says so (jobguard.ErrRequeued), and for a
//     loss only a notice told the middleware reads the row
//     (StartGuard.Requeued). River is then told river.JobSnooze(0): the
//     job is available at once, no attempt used, and its next attempt
//     starts the row again; the loss is logged (info). Cancelling it
//     would leave the row QUEUED with nothing to run it.
//   - Returns every other error as it came: River retries it (a failed
//     start under FailClosed, an unreachable database, the worker's own
//     errors), or snoozes it for river.JobSnooze. A retry starts a new
//     execution, which fences out the one before.
//
// Every cancellation is logged once (info), since River logs it only at
// debug, and River records the error with the job.
//
// # What it does not guarantee
//
//   - The worker finishes the row. The middleware writes nothing after the
//     worker returns: a worker that returns nil without completing leaves
//     the row PROCESSING. A worker that fails its row itself (Guard.Fail)
//     should return river.JobCancel too, or River's retry is refused at
//     start and cancelled one attempt later.
//   - River's own endings of a job leave the row as it is. A job River
//     discards after its last attempt, or that is cancelled through River's
//     client, leaves its row PROCESSING, and riversource no longer lists
//     it, since it only reads running River jobs; a reclaimer over the jobs
//     table itself (reclaim's TableSource) still finds it.
//   - River does not fence its own attempts. When River's rescuer re-queues
//     a job whose worker is still running (RescueStuckJobsAfter, an hour by
//     default), the new attempt's start fences out the old execution, whose
//     refused save then cancels the River job, which River applies while
//     the new attempt still runs, so River reports 'cancelled' for a row the
//     new attempt completes. Keep the job types' limits below
//     RescueStuckJobsAfter, so the reclaimer decides before River's rescuer
//     does.
//   - The start is not bounded by River's JobTimeout: River applies it to
//     the worker only, inside the middleware. Long external calls need a
//     JobTimeout to match (River's default is one minute).
//   - Cancellation through the watcher is cooperative, as package watch
//     says: it stops only calls that honour their context.
//
// # Use
//
// A River shop needs nothing but Postgres: the reclaim markers live in the
// table marker.Migration (package jobguard/marker) creates (Shared.Markers defaults to
// jobguard.MarkersPostgres), and the watcher's notices travel over
// LISTEN/NOTIFY (watch.Transport{Postgres: pool}).
//
//	starts, err := jobguard.NewStartGuard(guard, nil, jobguard.StartGuardConfig{}) // no Redis
//	guarded, err := riverguard.New(riverguard.Config{
//		StartGuard: starts, DB: pool, Watcher: w, Kinds: []string{"chapter"},
//	})
//	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
//		Middleware: []rivertype.Middleware{guarded},
//		// ...
//	})
//
//	func (w *ChapterWorker) Work(ctx context.Context, job *river.Job[ChapterArgs]) error {
//		result, err := callTheModel(ctx) // cancelled if the job is reclaimed
//		if err != nil {
//			return err
//		}
//		exec, _ := riverguard.Execution(ctx)
//		return w.Guard.CompleteTx(ctx, w.Pool, exec, func(tx pgx.Tx) error {
//			return saveChapters(ctx, tx, result) // only runs if completion won
//		})
//	}
//
// Installed on the client, the middleware sees every job; Config.Kinds
// limits it to the kinds that have a row in the jobs table (the keys of
// riversource's Config.Types, if set). A worker can instead return it from
// its own Middleware method, for its kind alone.
package riverguard
