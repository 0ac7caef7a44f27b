// Package history is the chaos run's second judge: an append-only history
// of what every process of the run did, and a checker that reads it, with
// the database's final state, as data.
//
// The checker shares no code with the guards it judges: it imports none of
// jobguard, reclaim, settle or usage, and decides nothing the way they do.
// It walks each job's events in the order the database appended them and
// validates:
//
//   - every confirmed (job, generation) is billed exactly once per meter,
//     nothing unconfirmed is billed, and the ledger holds what was billed;
//   - no write is accepted from a superseded generation;
//   - no product row or READY parent exists for a job that is not
//     COMPLETED at the row's generation;
//   - no reclaim judged an attempt that showed progress within the
//     no-progress window, or had not run past its limit, on the database's
//     clock;
//   - every refusal gives a typed reason, and a refused operation took no
//     effect;
//   - FAILED leaves only through Retry, COMPLETED never changes;
//   - a rescue (the job of a worker whose lease lapsed, back to QUEUED)
//     takes only a running job, and opens a new attempt: the rescued
//     generation writes nothing more;
//   - an operator's cancel holds: the cancelled job starts, completes and
//     bills no more unless a Retry reopens it;
//   - generations only grow;
//   - the final state is what the history did, and the sweeps' reports
//     agree with it.
//
// # The history
//
// One event per operation: an invoke before it, then its outcome: ok,
// refused (with its reason) or failed. A process killed between an invoke
// and its outcome leaves the invoke alone; the driver that killed it
// records a crashed event for the process. Such an invoke, and one whose
// outcome is failed (the commit, or only its answer, was lost), may or may
// not have taken effect: the checker lets it explain the final state and
// never holds it against the run.
//
// Events live in a table of the run's database (Schema), written where a
// SIGKILL cannot lose an acknowledged one: an ok in the operation's own
// transaction wherever the operation has one (a start, a heartbeat, a
// completion with its product rows, a fail, a retry, a reclaim with its
// parent rule, a billing with its ledger row), so it exists exactly when
// the operation committed; an invoke in its own statement, committed
// before the operation begins; a refusal or a failure in its own statement
// right after the call returns. Heartbeats and the sweeps' per-job effects
// have no invoke: their ok is in their transaction, which leaves nothing
// indeterminate. Every event carries the database's clock: At, when it was
// written (after the operation's statements), and TxAt, when its
// transaction began (before them), so that the progress rule compares a
// reclaim's latest possible moment with a heartbeat's earliest: no clock
// of a worker is read.
//
// What it does not show: an indeterminate operation is not resolved, only
// allowed; a refusal's reason is checked for its type, not for its truth.
package history
