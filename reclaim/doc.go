// Package reclaim is the recovery sweep: it finds jobs that are really
// stuck and fails them, without ever failing a job that is merely slow.
//
// # What it guarantees
//
// A job is reclaimed only when both signals agree: the runtime of its
// current attempt (now minus the start time its queue reports) exceeds the
// limit of its job type, and its updated_at has not moved for at least the
// no-progress threshold. A job with no start time, an unreadable job, and a
// job whose type has no limit are skipped (the last two with a warning),
// never guessed.
//
// The write is one conditional UPDATE for all the chosen jobs: each row is
// matched on its id and on the status, updated_at and generation it was read
// with, and only the rows it really changed come back. A job that made
// progress, finished or was restarted between the read and the write is
// left alone and counted as a lost race: its parent is not touched and no
// marker is written for it. Parent rules (OnReclaim, per job type) run in the
// same transaction, for the changed rows only. After the commit, the Redis
// markers that the start guard reads are written in one pipelined round
// trip. Several reclaimers sweeping the same jobs at once reclaim each job
// once.
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
// # What it does not do
//
// It does not stop the stuck worker: a late worker finds out at its next
// guarded write (heartbeat, completion), which the conditional writes of
// package jobguard refuse. Runtime is measured with the queue's clock
// against the reclaimer's clock, and updated_at is stamped by the database's
// clock, so skew between those clocks shifts the limit and the threshold.
// A marker write that fails is counted and logged; the database reason
// still refuses the job at start. A parent rule that fails rolls back the
// whole sweep's write, and the sweep returns its error.
//
// # Usage
//
//	r, err := reclaim.New(reclaim.Config{
//		Guard:  guard,
//		DB:     pool,
//		Redis:  rdb,
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
