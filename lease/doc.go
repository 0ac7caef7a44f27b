// Package lease tells a dead worker process from a slow one: each worker
// process holds a lease, a row of the workers table (Migration) whose
// expiry is the database's clock plus a TTL, renewed in the background and
// released on a clean shutdown. A job whose owner's lease is not live was
// left by a process that died, was stopped, or lost its path to the
// database; its job can go back for another attempt within a bound set by
// the lease, not by the job type's runtime limit.
//
// # What it guarantees
//
//   - Time is the database's. The expiry is written as now() + TTL by the
//     statement itself, and "is it live" is expires_at > now() on the
//     database's clock. No time of the process reaches the database; its
//     own clock (Config.Now) only measures how long ago its last renewal
//     was sent. The TTL crosses into SQL as whole microseconds, rounded
//     up, and never overflows.
//   - The bound: a process's death is visible within TTL of the last
//     renewal the database executed. A process renews every Renew, so one
//     killed at time D is dead to Workers.Live and Workers.Dead by D + TTL
//     (a renewal it sent just before dying may land a moment after; to
//     Workers.Dead and the rescue, once no transaction holds its row), and
//     a process stopped or cut off from the database the same. A clean
//     Stop makes it dead at once.
//   - An expired lease stays expired. A renewal is conditional on the row
//     still being live; a process that comes back after its lease lapsed
//     (SIGCONT, a thawed network path) finds its renewal refused: Lost is
//     closed and Err is ErrLost. A process that could not renew for TTL
//     by its own measure gives the lease up first (ErrExpired), stops
//     renewing and releases it, so that a worker stops its executions no
//     later than the database sees it dead.
//   - A renewal that cannot reach the database is retried, every Renew/4,
//     while the lease lasts; each statement is bounded by Timeout and by
//     the time the lease has left, both shorter than TTL.
//   - One id, one process start. Start refuses an id that has a row, live
//     or not, so that a restarted process can never make the jobs of its
//     dead predecessor look alive. A released lease keeps its row (dead);
//     Workers.Prune deletes long-ended ones, and a pruned owner is dead too.
//   - The renewer is a goroutine owned by the Lease: Stop ends it and waits
//     for it; nothing is left behind.
//
// # What it does not promise
//
//   - Dead is not the same as stopped. A lease that lapsed says the
//     process may be gone, not that it is: a stopped process continued, or
//     a path thawed, can still run an execution for a moment before it
//     reads Lost. What makes that safe is the generation: a job handed to
//     another attempt has a new one, and the old execution's writes are
//     refused. The lease bounds how long a dead worker's job waits; the
//     generation keeps a live one's late writes out.
//   - A live lease is not progress. A process whose execution hangs keeps
//     its lease; that job is judged by its type's limit and its progress,
//     as before.
//   - The database's clock is assumed to move forward at the rate the
//     process's does. A wall-clock step on the database server moves every
//     lease's expiry with it.
//   - A renewal still in flight when the process gives its lease up
//     (ErrExpired) can land if the database receives it before the lease
//     expires on its own clock; the release that follows ends the lease
//     again once it lands. A process cut off for good leaves the bound as
//     stated: TTL after the last renewal the database executed.
//   - The lease shares its DB with whoever else uses it. A worker whose
//     pool is held by long executions can starve its own renewals: give
//     the lease a pool of its own (one or two connections) or headroom.
//
// # Use
//
//	l, err := lease.New(leasePool, lease.Config{TTL: 30 * time.Second})
//	if err != nil {
//		return err
//	}
//	if err := l.Start(ctx); err != nil {
//		return err
//	}
//	defer l.Stop(context.WithoutCancel(ctx))
//	ctx, cancel := context.WithCancel(ctx)
//	go func() { <-l.Lost(); cancel() }() // lost: stop every execution
//	// ... run jobs, each owned by l.ID() ...
//
// A reclaimer asks the other side of the question with Workers.DeadLocked,
// a predicate to put inside its own conditional UPDATE (it locks the
// expired lease rows it finds, so that no renewal under way revives one),
// or Workers.Dead; Workers.Live is for reads that act on nothing.
package lease
