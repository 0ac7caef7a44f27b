// Package watch cancels the work of executions that lost their job.
//
// After a reclaim, jobguard already refuses the late result of the original
// execution, but its external call (a model call, an encode) keeps running
// and costing money until it returns. A Watcher gives each execution a
// context that is cancelled as soon as the execution is known to have lost
// the job, so the call stops instead.
//
// The reclaimer publishes a Notice (job id and reclaimed generation) for
// every job it reclaimed, once its write has committed, through a Publisher:
// Redis pub/sub, or Postgres LISTEN/NOTIFY, chosen by Transport. Notices
// over Postgres, with the reclaim markers in Postgres too (jobguard's
// Shared.Markers), make a deployment that needs no Redis at all; they also
// suit one whose Redis should not carry pub/sub (a managed Redis without
// it, or one shared with other tenants), and they can be sent inside the
// reclaim's own transaction. Every worker process runs
// one Watcher with one subscription for all its executions.
//
// # What it guarantees
//
//   - A watched context is cancelled, with a *LostError cause that
//     wraps jobguard.ErrJobTerminal (so jobguard.IsPermanent reports true,
//     unless LostError.Requeued: the job went back to the queue for
//     another attempt and wraps jobguard.ErrRequeued too), when (a) a notice for its job arrives at its generation or a later one,
//     (b) the caller reports a heartbeat that affected zero rows (Lost), or
//     (c) the periodic Check reads the row and finds it gone, at another
//     generation, FAILED with the reclaimer's reason or an operator's
//     cancel's, or QUEUED again. The cause says which (Via) and carries the
//     job id and generations.
//   - An operator's cancel (jobguard.Guard.Cancel) cancels the execution
//     like a reclaim, and its cause says so: LostError.Cancelled, "was
//     cancelled by an operator", and it wraps jobguard.ErrCancelled. Over
//     Postgres the notice is Cancel's own, sent in its statement and
//     delivered only if it commits; over Redis, publish what Cancel
//     returned with Publisher.PublishCancelled once it has committed. A
//     cancel whose notice is lost is found by the check, by the bumped
//     generation or, on a table without one, by the cancel's reason.
//   - An execution that ended its job itself is not cancelled: a row
//     COMPLETED, or FAILED with a reason that is not the reclaimer's, at the
//     execution's own generation is its own write, so the check only stops
//     watching it. Whatever it still runs under its context after that (a
//     finalize's metadata updates, a cleanup) runs to the end.
//   - A notice never cancels a newer execution. The reclaim's write is
//     fenced by the generation it read, so the notice names the generation
//     that lost the job; every execution of that job at that generation or
//     an older one has been fenced out and is cancelled, and an execution
//     started afterwards (a higher generation) is left alone.
//   - A notice never cancels another job. It names its job by the id as the
//     column prints it and by its jobs table (jobguard.Guard.TableKey); a
//     watcher keeps each execution under its job's canonical id, whatever
//     spelling Watch was given, and applies only the notices of its own
//     guard's table, so the jobs tables of one database may share a
//     channel (job 42 of the exports is not task 42). A notice that names
//     no table (a publisher from before notices did) makes it check every
//     execution instead.
//   - A lost notice is caught within one CheckInterval (30s by default):
//     one query reads the rows of every watched execution. After the
//     subscription was lost (a Redis or Postgres outage, a killed session)
//     the watcher resubscribes with a doubling backoff and checks every
//     execution as soon as it is subscribed again, since notices sent in
//     between were missed. A silent subscription is pinged every
//     PingInterval, so a dead connection is noticed too.
//   - One subscription per process: Watch and release only touch a map.
//     Run owns the goroutines and leaves none behind when its context ends,
//     but for a check's read it abandoned (below), which ends when that
//     read returns.
//   - A read, a subscription or a log line that panics never ends the
//     process: a check that panics fails and the next one runs at the next
//     interval; a check whose read ignores its context is abandoned a
//     second after its timeout, so one stuck read cannot stop the checks
//     that catch lost notices; a subscription that panics is resubscribed
//     with the backoff. Each is logged with its stack.
//   - With Postgres, a notice published inside the reclaim's transaction
//     (Publisher.PublishOn) is delivered only if it commits.
//     Payloads are JSON arrays split to stay under the 8000-byte NOTIFY
//     limit.
//
// # What it does not guarantee
//
//   - Cancellation is cooperative: it helps only where the external call
//     honours its context. It does not refund a call already made, and the
//     guarded writes of jobguard remain what keeps a late result out.
//   - Notices are not durable. Redis pub/sub and NOTIFY reach only
//     subscribers connected at that moment; anything missed waits for the
//     next check (bounded by CheckInterval), or for the check after
//     resubscribing.
//   - On a table without a generation column a notice cannot tell an old
//     execution from a new one, so it only triggers a check of the rows; a
//     job that was reclaimed and started again in between is not caught
//     (the status-only weakness jobguard documents), and a COMPLETED row is
//     taken as the execution's own completion.
//   - The check tells a reclaim from the execution's own Fail by the failure
//     reason alone, the guard's Shared.ReclaimedReason, which the
//     reclaimer writes.
//   - Watch the execution only after Start has committed: the check would
//     otherwise read the row as it was before the start and cancel it.
//   - Contexts are not cancelled when Run returns; they are simply no
//     longer watched.
//
// # Inside your transaction
//
// The watcher reads rows on its own pool (Config.DB), outside any
// transaction of yours, so it sees only what has committed: a Start still
// inside your transaction is not there yet, which is why Watch comes after
// Start has committed. Publisher.PublishOn given the reclaim's
// pgx.Tx sends its notices with that transaction's commit, and never if it
// rolls back; Publish sends at once.
//
// # Use
//
//	// In the reclaimer, after the reclaim committed:
//	pub, err := watch.NewPublisher(guard, watch.Transport{Redis: rdb})
//	err = pub.Publish(ctx, watch.NoticesFrom(reclaimed)...)
//
//	// In each worker process:
//	w, err := watch.New(watch.Config{Guard: guard, DB: pool, Transport: watch.Transport{Redis: rdb}})
//	go w.Run(ctx)
//
//	exec, err := starts.Start(ctx, pool, jobID)
//	runCtx, release := w.Watch(ctx, exec)
//	defer release()
//	result, err := callTheModel(runCtx) // stops when the job is reclaimed
//	if res, err := hb.Beat(ctx, pool, exec, ev); res == heartbeat.Lost {
//		w.Lost(ctx, exec, err) // cancels runCtx at once
//	}
//	var lost *watch.LostError
//	if errors.As(context.Cause(runCtx), &lost) { /* do not retry; nothing to save */ }
package watch
