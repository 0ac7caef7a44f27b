// Package heartbeat moves a job's updated_at on evidence that its work
// advanced, and rate limits those writes per job within one process.
//
// The reclaimer judges a long job by two signals: how long it has run, and
// whether its updated_at still moves. A heartbeat is that second signal, so
// it is sent only on evidence of progress: a progress value saved
// (Progress), output produced (Output), an external job's poll answered
// (Poll). There is deliberately no timer-driven API. A ticker goroutine keeps
// beating while the call it watches hangs, which makes a stuck job look
// alive: exactly what the reclaimer must be able to see.
//
// # What it guarantees
//
//   - Per job, within one Heartbeat (one per process), at most one write per
//     interval (IntervalDefault, 5 minutes). A progress callback may call
//     Beat thousands of times a second; all but one per interval return
//     Throttled without touching the database, and without allocating.
//   - The slot is claimed before the write. A write that fails, whose context
//     is cancelled, or that affects zero rows uses up the interval all the
//     same, so a failing database is not hammered by retries.
//   - At most one write per job is in flight. Concurrent beats of a job whose
//     write is running return Throttled at once; they never wait on the
//     database.
//   - Every write is the guard's conditional UPDATE (jobguard's Touch and
//     TouchProgress): it moves updated_at only while the job is PROCESSING
//     at the execution's generation. Zero rows is Lost with an error
//     wrapping jobguard.ErrJobTerminal: the worker has lost the job and
//     should stop.
//   - Memory stays bounded without a background goroutine. Entries are kept
//     in two generations of about an interval each; the first beat that
//     claims a slot more than an interval after the current generation
//     began drops the older one whole, so jobs left alone fall out once
//     other beats keep arriving.
//     Forget drops a job at once; Len reports the size for monitoring.
//
// # What it does not guarantee
//
//   - The limit is per process, not across processes. Two workers beating
//     the same job (which the generation fence already makes unusual) each
//     write once per interval.
//   - Throttled beats are not saved: the progress column shows the percent of
//     the last beat that wrote, up to an interval old. Save exact progress
//     yourself if the product shows it.
//   - A Heartbeat created with a zero or negative Interval does not fail:
//     New returns no error, so it uses IntervalDefault instead.
//   - On a table without a generation column, writes are fenced by status
//     only, as jobguard documents: a stale execution of a job that was
//     restarted can still move its updated_at.
//
// # Inside your transaction
//
// Given a pgx.Tx, Beat writes in that transaction: the reclaimer sees the
// progress only once it commits, and not at all if it rolls back, while the
// slot is used up either way. Until then the transaction holds the job's
// row, and a reclaimer skips a row that is held (it is being written), so
// a long transaction delays the job's reclaim rather than hiding progress
// from it. The stamp is the time of the statement, not the start of the
// transaction.
//
// # Use
//
//	hb := heartbeat.New(guard, heartbeat.Config{})
//	defer hb.Forget(exec.JobID)
//	for chunk := range encoder.Output() {
//		res, err := hb.Beat(ctx, pool, exec, heartbeat.Output(int64(len(chunk))))
//		if res == heartbeat.Lost {
//			return err // the job was reclaimed: stop encoding
//		}
//		// Failed: the error is worth a log line, not a stop.
//	}
package heartbeat
