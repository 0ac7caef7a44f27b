// Package asynqguard runs asynq tasks as guarded executions of the jobs in
// a jobs table.
//
// New returns an asynq.MiddlewareFunc. For every task it finds the row of
// the task's job (a key of the JSON payload, or the task id), starts the
// job through jobguard's start guard, runs the handler with the
// Execution in its context (read it with Execution) and, when a
// watch.Watcher is configured, under the watcher's context, so that the
// handler's external call stops when the job is reclaimed. Whatever the
// guards refuse, it tells asynq not to retry; whatever else fails, asynq
// retries as usual.
//
// It is a module of its own, so that asynq reaches only the programs that
// import it.
//
// # What it guarantees
//
//   - The handler never runs for a job the start guard refuses: a job
//     reclaimed (its failure reason or its Redis marker says so), FAILED,
//     COMPLETED or gone, or a task that names no row. asynq does not retry
//     the task.
//   - Every delivery the handler does run is a new execution: Start bumps
//     the row's generation (on a table with a generation column), so a redelivery (asynq's retry, its recovery
//     of a task whose lease expired, an abandoned attempt past its asynq
//     deadline) fences out every older execution of the job, whose writes
//     then change nothing.
//   - A permanent refusal is never retried: an error from Start, or from
//     the handler, for which jobguard.IsPermanent reports true, and any
//     attempt whose watched context was cancelled with a *watch.LostError
//     cause (the handler's error is kept beside the cause, and even a nil
//     return is refused: an execution that lost its job did not complete
//     it). Such an error is returned to asynq wrapping asynq.SkipRetry.
//   - A loss to another attempt of the job is not permanent: when the row
//     is QUEUED again under a newer generation (the reclaimer's rescue of
//     a worker whose lease lapsed and that came back, an operator's
//     Retry), the loss, wrapping jobguard.ErrRequeued, is returned for
//     asynq to retry, and the retry starts the row again. Set
//     asynq.Config.IsFailure to IsFailure so that such a retry uses up
//     none of the task's MaxRetry; a task already at its MaxRetry is
//     archived by asynq whatever the error.
//   - Every other error is returned as it is, and asynq retries it: the
//     handler's own errors, and the fail-closed start guard's
//     jobguard.ErrGuardUnavailable when Redis or the database could not be
//     read. An error the handler already wrapped with asynq.SkipRetry or
//     asynq.RevokeTask is its own decision and is left alone, unless its
//     execution was lost: the loss is then archived, with the handler's
//     error as text (asynq would drop a RevokeTask as done). riverguard
//     decides by the same rule, and reads River's args by the same rule as
//     the payload here: a string as it is, a number as jsonb prints it when
//     that is an integer (-0 is 0, 1e3 is 1000).
//
// # What it does not guarantee
//
//   - It starts the execution; it does not complete it. The handler saves
//     its result with the guard's CompleteTx (or Finalize) and the
//     Execution, and that conditional write is what keeps a late result out.
//     A handler that saves without them is not guarded.
//   - When asynq gives up on a task (its retries are exhausted), the row is
//     left as the last execution left it, usually PROCESSING. The reclaimer
//     fails it once it is over its type's limit.
//   - A delivery of a job that is already COMPLETED (asynq delivers at least
//     once: its lease may expire after the completion committed) is refused
//     like any other, and lands in the archive saying the job is COMPLETED.
//   - asynq's own deadline (asynq.Timeout, 30 minutes unless set) abandons
//     the handler and retries the task, before a longer limit of the job
//     type could apply. The retry's Start fences the abandoned execution
//     out, but set the task's Timeout above the job type's limit so that
//     the reclaimer, not asynq, decides when a job is stuck.
//   - Cancellation through the watcher is cooperative; see package watch.
//
// # What asynq records: the archive, not a revoke
//
// A refused task is archived (asynq.SkipRetry), not revoked
// (asynq.RevokeTask). asynq deletes a revoked task outright, counts it as
// processed and not as failed in the queue's statistics, and logs only its
// id: the reason for the refusal would be lost, and the refusal would count
// as a success. An archived task keeps its payload and the refusal as its
// last error ("asynqguard: task … (chapter): jobguard: job was reclaimed:
// job … (marker: …) (skip retry for the task)"), counts as failed in the
// queue's statistics, and stays listed (Inspector's
// ListArchivedTasks, asynqmon, "asynq task ls -q <queue> -s archived") for 90
// days or the queue's latest 10,000 archived tasks. So an operator sees in
// asynq what the jobs table already says: the job failed, and why, and the
// task was tried once (Retried 0).
//
// Running an archived task again (Inspector.RunTask, "asynq task run") is
// refused again as long as the row stays refused. To run a reclaimed job
// again, retry its row first (jobguard's Guard.Retry: back to QUEUED under
// a new generation, past its reclaim marker; a table without a generation
// column cannot tell an old marker from a new one, so delete the marker
// too), then run the archived task.
//
// # Reclaiming asynq jobs
//
// There is no asynq source for package reclaim, because asynq records no
// start of a task's current attempt: its TaskInfo has none. The only start
// times asynq writes are in each server's list of its active workers
// (Inspector.Servers): a snapshot the process rewrites every five seconds,
// which expires ten seconds after it stops, and which names a task, not an
// attempt of it. The jobs table knows better: StartGuard.Start stamps the
// table's started_at column (Table.StartedAtColumn) in the statement that
// bumps the generation, on the database's clock, so it is the start of the
// current attempt. Reclaim asynq jobs from the table with
// reclaim.NewTableSource, the reclaimer's default source, which needs that
// column:
//
//	r, err := reclaim.New(reclaim.Config{Guard: guard, DB: pool, Redis: rdb,
//		Notices: pub}) // Source defaults to reclaim.NewTableSource(guard, pool)
//
// # Use
//
//	w, err := watch.New(watch.Config{Guard: guard, DB: pool, Transport: watch.Transport{Redis: rdb}})
//	go w.Run(ctx)
//	<-w.Ready()
//
//	mw, err := asynqguard.New(asynqguard.Config{StartGuard: starts, DB: pool, Watcher: w})
//	mux := asynq.NewServeMux()
//	mux.Use(mw) // or wrap a single handler: mux.Handle("chapter", mw(h))
//	mux.HandleFunc("chapter", func(ctx context.Context, t *asynq.Task) error {
//		exec, _ := asynqguard.Execution(ctx)
//		result, err := callTheModel(ctx) // stops if the job is reclaimed
//		if err != nil {
//			return err
//		}
//		return guard.CompleteTx(ctx, pool, exec, func(tx pgx.Tx) error {
//			return saveChapters(ctx, tx, result)
//		})
//	})
//
// The task's payload names the row: {"job_id": "…"} by default
// (Config.PayloadKey), or enqueue it with asynq.TaskID(rowID) and set
// Config.IDFrom to IDFromTaskID.
package asynqguard
