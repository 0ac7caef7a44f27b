// Package reclaim is the recovery sweep: it finds jobs that are really
// stuck and fails them, without ever failing a job that is merely slow.
//
// # What it guarantees
//
// A job is reclaimed only when both signals agree: the runtime of its
// current attempt exceeds the limit of its job type, and its updated_at has
// not moved for at least the no-progress threshold. The rule is one pure
// function (decide), applied the same way to every source:
//
//   - The current attempt is the latest one known. Its start is the later
//     of the queue's start for the listing (the latest, when a queue lists
//     one row twice) and the row's own start column, when the table has one.
//   - A listing of an attempt the row no longer runs is stale and never
//     acted on: the row is QUEUED (an operator's Retry waiting to run), its
//     generation is past the listing's (when the source knows it), or its
//     own start is later than the listing's. So a queue that still lists a
//     hung first attempt after a Retry can neither fail the retried job nor
//     measure the new attempt on the old attempt's clock.
//   - Progress is compared on the database's clock: updated_at and the time
//     the row was read both come from the database, so a reclaimer whose
//     own clock runs ahead never takes a beating job for stalled.
//   - A job with no start anywhere, an unreadable listing, and a job whose
//     type has no limit are skipped and counted, never guessed. TableSource
//     never lists a running row without a start; every sweep counts such
//     rows (Report.NoStartTime) and its summary says they are never
//     reclaimed.
//   - A limit is a duration in range: one longer than LimitMax (about 292
//     years; '1000 years' or 'infinity' in the limits table) is LimitMax, a
//     limit no job reaches, and one that is not positive fails the sweep,
//     naming its type, rather than make every job of the type overdue.
//
// The write is one conditional statement for all the chosen jobs of a page:
// each row is matched on its id and on the status, updated_at and generation
// it was read with, and only the rows it really changed come back. A job
// that made progress, finished or was restarted between the read and the
// write is left alone and counted as a lost race: its parent is not touched
// and no marker is written for it. A row that another transaction holds is
// skipped, not waited for (SKIP LOCKED): a transaction holding a job's row is
// writing it, which is progress, and one idle worker transaction must not
// stall every other reclaim. Parent rules (OnReclaim, per job type) run in
// the same transaction, for the changed rows only, and move a parent only
// from the states they expect; a rule that fails holds back only its own
// jobs, which are counted and tried again at the next sweep: the page's
// other jobs commit first, and each held-back job is then tried alone, in
// a transaction of its own. A rule waits for a parent row another
// transaction holds, but the waits of one sweep are bounded all together,
// by LivenessTimeout and half of SweepTimeout, and so is the time a rule's
// statements run: once that is spent, a held parent fails its rule at
// once, and a statement that runs longer than 100ms fails its rule. However many parents are held, the jobs
// whose parents are free, and those of types without a rule, commit within
// the deadline. The reclaim markers that the start guard reads go where
// the guard's Shared.Markers says: in Postgres (the default) they are
// written by the reclaim's own statement, so a marker commits with its
// reclaim or not at all, and no Redis is needed; in Redis they are written
// after the commit, in one pipelined round trip. Either way a marker never
// lowers the generation it records, and the notices follow the commit. Several reclaimers
// sweeping the same jobs at once reclaim each job once.
//
// What a sweep costs grows with the stuck jobs, not the running ones: the
// default source, TableSource, reads only the rows over their type's limit,
// one index range per type (the status is a literal in the SQL, so a
// partial index on the active statuses applies, and the type and start
// columns are compared bare; the bundled migration's index on (type,
// started_at) over the active statuses is the one it needs), and every
// source is read a page at a time (Config.PageSize), so memory is bounded
// whatever the number of running jobs. A sweep reads the limits and the
// active types once, then each page costs two statements: the read and the
// write. Every sweep has a deadline (Config.SweepTimeout), and logs one
// summary line with every counter.
//
// Run sweeps on an interval with one leader across instances, elected by a
// Postgres advisory lock that each instance tries on a connection of its
// own, outside the pool. When the leader stops or its connection dies, the
// server releases the lock at once and a standby takes over within an
// Interval. When its path goes silent instead (a half-open connection, a
// frozen proxy, a stopped process), the server ends the leader's session
// after Interval + SweepTimeout + LivenessTimeout without a word from it
// (idle_session_timeout, PostgreSQL 14 or later), and a standby that
// reaches the server leads within 2×Interval + SweepTimeout +
// 3×LivenessTimeout of the leader's last contact. The leader checks its
// session before each sweep, bounded by LivenessTimeout, and stops sweeping
// when the check fails. For a moment two instances may sweep at once (a
// leader whose lock connection froze while its pool still works finishes
// the sweep under way): that is safe, as reclaims are conditional writes and
// concurrent sweeps reclaim each job once.
//
// The code a sweep is given (a parent rule, the notifier, a source, the
// limits) may panic without taking the process with it: a rule's panic
// fails its jobs like a rule's error (RuleErrors, tried again at the next
// sweep), a notifier's loses its notices (NoticeErrors), a source's or the
// limits' fails the sweep (its error wraps a *jobguard.PanicError). The
// summary line logs the first panic's value and stack, at warn. Run goes
// on through a logger or a meter that panics.
//
// # A dead worker: the rescue
//
// A worker process that dies (killed, stopped, cut off from the database)
// leaves its job PROCESSING, and the limit rule alone would wait out the
// job type's limit, minutes or hours, before it judged the job. With
// Config.Workers set, each sweep first reads the PROCESSING jobs whose
// owner (the mapping's OwnerColumn, written by StartGuard.Start from
// StartGuardConfig.Owner, a package lease Lease) has no live lease on the
// database's clock, and rescues them in one conditional UPDATE per page:
// back to QUEUED, generation + 1, no owner, no start, the failure reason
// Shared.RescuedReason (which the start guard does not refuse). The
// statement matches each row on its id, generation and owner as read and
// on the owner's lease still not live, and skips rows other transactions
// hold (SKIP LOCKED), as the reclaim's write does. No marker is written
// and no parent rule runs: the job was not failed. Each rescue is counted
// (Report.Rescued, the decision rescued of jobguard.reclaim.decisions, the
// summary line's rescued=) and announced through Config.Notices with the
// generation that lost the job, so that a watcher in a process that comes
// back (SIGCONT, a thawed path) cancels the old execution; its heartbeat
// and save are refused by the generation whatever the watcher does.
//
// A job with no owner, or whose owner's lease is live, is judged by the
// limit and progress rule exactly as before: a live process renews its
// lease however long its call hangs, so a live slow worker is never
// rescued.
//
// The bound: a job whose worker died at time D is back in QUEUED by
// D + TTL + Interval, plus one sweep's duration: the lease is dead to the
// database within TTL of its last renewal (package lease), and the next
// sweep of Run, within one Interval, rescues it. What then runs it again
// depends on the queue, and the principle is the same for each: whichever
// start comes first takes a new generation and wins; every older
// execution is refused at its next guarded write.
//
//   - The jobs table as the queue (TableSource): the rescue is the
//     redelivery. Workers that poll for QUEUED rows start it under their
//     own lease within their poll interval.
//   - River: the jobs table's row is QUEUED, but River's own row stays
//     running until River's rescuer moves it (RescueStuckJobsAfter, an
//     hour by default), so River runs it again within that setting, not
//     the lease's bound. Set RescueStuckJobsAfter shorter (minutes) to
//     bring River's redelivery nearer: a live slow job that River
//     redelivers early is safe (its new attempt bumps the generation and
//     the old execution is refused), only wasteful. Should River's rescuer
//     come first, its new attempt's Start bumps the generation and the
//     rescue's write, matched on the generation read, loses the race.
//   - BullMQ: its stalled check moves a job whose worker stopped renewing
//     its lock back to wait (or fails it past maxStalledCount) within
//     stalledInterval, usually before the rescue; the redelivery's Start
//     wins by generation, as above.
//   - asynq: a task whose worker died is handed out again by its recoverer
//     once the task's lease (30s by default) expires; the same rule holds.
//
// What a delivery that comes back tells its queue: its watcher cancels
// it, its writes are refused with jobguard.ErrRequeued (not permanent: the
// row waits QUEUED for another attempt), and the queue adapters deliver the
// job again (River: JobSnooze(0); asynq: a retry that
// asynqguard.IsFailure does not count); a BullMQ processor that follows
// jobguard.IsPermanent moves the job back. A process that was killed never
// comes back, and the queue's own redelivery runs the job. A queue that
// has given the job up itself (River at MaxAttempts, asynq at MaxRetry,
// BullMQ past maxStalledCount) leaves the row QUEUED with no delivery:
// look for QUEUED rows whose failure reason is Shared.RescuedReason and
// that stayed so longer than the queue's redelivery bound, and enqueue
// them again. The table source has no second queue to disagree with.
//
// # Before it writes: shadow mode and plans
//
// A limit set too tight throws good work away. Config.Shadow runs the whole
// decision (source, limits, progress, the current-attempt rule) on every
// sweep and writes nothing: no row, parent, marker or notice. The jobs it
// would reclaim are counted (Report.WouldReclaim, the decision
// would_reclaim) and logged one line each, so a shadow reclaimer can run
// beside production for a week before it is enabled, or after a limit was
// lowered. Shadow instances elect their own leader and never take a live
// reclaimer's lock. Plan is the one-shot form on any reclaimer: the
// decision of every listed job with its runtime, limit and time without
// progress, and in words (PlannedJob.String).
//
// Suggest reads the limits from evidence instead of guesses: per type, the
// runtimes of the latest completions (jobset's Set.History, one index
// range per type over a bounded window), how many of them ran longer than
// the current limit, how many jobs were reclaimed, and a suggested limit (a
// percentile times a margin, never below the longest completion unless
// asked). It writes nothing; TableLimits.Set applies a suggestion.
//
// # A brake on a runaway sweep, and a pause per type
//
// When the evidence itself is wrong, the rule above reclaims everything at
// once: heartbeats that cannot be written (a database role changed, a
// network partition between the workers and the database) make every
// running job look stalled together, and a database clock that jumps makes
// every job look older. A sweep therefore holds what its pages decide to
// reclaim until it has seen them all, and its Brake decides (brakeRule, a
// pure function): past a cap per type or in all (a count, and a share of
// the running jobs above a floor, so that a small deployment whose few jobs
// all stalled is never held), it reclaims the jobs stalled longest up to
// the cap; when the database's clock moved apart from the reclaimer's
// since the last sweep by more than Brake.ClockJump, it reclaims nothing,
// and rescues nothing (a lease's expiry is on the same clock; the next
// sweep, whose clocks agree, rescues). The caps on a count do not hold
// rescues: a rescue fails no job, and sends it back for another attempt.
// The jobs held back are counted in Report.Braked (the decision braked),
// the reason is in Report.BrakeReason, and the sweep's line is logged at
// error. A real stall is then reclaimed a cap per sweep, or at once after
// an operator's ReleaseBrake. The running jobs are counted only when a
// share cap could bind: a TableSource counts them from the active index
// (CountRunning); a queue's source lists every one.
//
// Holding a sweep's reclaims costs memory for the jobs it decides to
// reclaim (the stuck ones), beside a page of listings.
//
// An operator may also switch one type off without touching its limit:
// the limits table's mode column (TableLimits.SetMode, jobguard limits
// pause) is ModeReclaim, ModeShadow (decided, counted as would_reclaim,
// never written) or ModeOff (counted as paused, never reclaimed
// automatically). A Limits that is not a ModeLimits has every type in
// ModeReclaim.
//
// # What it does not do
//
// It does not stop the stuck worker: a late worker finds out at its next
// guarded write (heartbeat, completion), which the conditional writes of
// package jobguard refuse, or sooner through package watch's notices. A
// queue's start time is measured against the reclaimer's clock (River's, on
// the database's own), so skew between the queue's clock and the
// reclaimer's shifts the limit by as much; progress, and a start read from
// the jobs table, are not exposed to it. A queue that moves while it is
// paged through may show a job on no page (it is seen at the next sweep) or
// on two; without a start column in the table and a generation from the
// source, two listings of one row on different pages are judged each on its
// own page. A Redis marker write that fails is counted and logged; the
// database reason still refuses the job at start. A Postgres marker that
// cannot be written fails its page's reclaim, which the next sweep tries
// again.
//
// # Transactions
//
// A sweep never runs inside a caller's transaction: Config.DB is a pool,
// and each page's write commits on its own (one statement; or, with parent
// rules, one transaction, then one for each job whose rule failed, tried
// alone). Parent rules run inside that transaction, each in a savepoint
// of its own, and see the rows it changed. Markers in Postgres are written
// by the page's fail itself, as a data-modifying CTE of the rows it
// failed; Redis markers and notices go out only after it has committed.
//
// A write whose COMMIT (or whose one statement) was sent but never
// answered, because the connection failed or the sweep's context ended
// while it ran, may have committed all the same. The sweep then reads the
// rows back on another connection, once the transaction holding them has
// ended (jobset's Settled; at most 10 seconds, the time the markers and
// notices of a commit get), and announces and counts what it finds
// reclaimed, or rescued, as if it had heard the commit; the sweep's error
// is still the write's. The rows tell what was done to them, not who did
// it: every execution that lost its job is told, and the counts are the
// rows' word — a job another reclaimer rescued meanwhile counts here too,
// and a job a worker started again before the read-back counts nowhere. A
// row another transaction still holds is left out (it is polled until two
// seconds of that time are left, or half of it when less than four are,
// to announce the rest). When the read-back
// fails too (the path to the server is gone), nothing is announced, the
// error says so, and the watchers' periodic
// check and the database reason remain.
//
// # Usage
//
//	r, err := reclaim.New(reclaim.Config{
//		Guard:  guard,
//		DB:     pool,
//		// Redis: rdb, only with Shared.Markers = jobguard.MarkersRedis
//		Limits: reclaim.StaticLimits{"chapter": 30 * time.Minute},
//		OnReclaim: map[string]reclaim.ParentRule{
//			"chapter": failCourse, // reclaim.SetParent(...)
//		},
//	})
//	if err != nil {
//		return err
//	}
//	return r.Run(ctx)
package reclaim
