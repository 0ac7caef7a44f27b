package history

import (
	"encoding/json"
	"time"
)

// Kind is what an event says about its operation.
type Kind string

// The kinds of event.
const (
	// KindInvoke: the process is about to run the operation. Written before
	// it, on its own, so that a process killed before the outcome leaves it.
	KindInvoke Kind = "invoke"
	// KindOK: the operation took effect. Written in the operation's own
	// transaction where the operation has one, so it exists if and only if
	// the operation committed.
	KindOK Kind = "ok"
	// KindRefused: the operation was refused and changed nothing; Reason
	// says why.
	KindRefused Kind = "refused"
	// KindFailed: the call returned an error that is not a refusal (a
	// terminated connection, a failed commit): it may or may not have taken
	// effect.
	KindFailed Kind = "failed"
	// KindCrashed: the process named by the event was killed. Its invokes
	// without an outcome may or may not have taken effect.
	KindCrashed Kind = "crashed"
)

// The operations of the history. Each names what its ok event does to the
// job it names.
const (
	OpStart     = "start"     // ok: the job is PROCESSING at Generation, a new attempt
	OpHeartbeat = "heartbeat" // ok: the attempt at Generation showed progress
	OpComplete  = "complete"  // ok: the job is COMPLETED at Generation
	OpFail      = "fail"      // ok: the attempt at Generation failed the job
	OpReclaim   = "reclaim"   // ok: a reclaim failed the attempt at Generation
	OpRetry     = "retry"     // ok: an operator's retry queued the job at Generation, a new attempt
	OpBill      = "bill"      // ok: the usage of (job, Generation) for Meter was billed
	OpRescue    = "rescue"    // ok: a rescue sent the running job, whose owner's lease lapsed, back to QUEUED at Generation, a new attempt; Detail: the owner
	OpCancel    = "cancel"    // ok: an operator's cancel failed the job at Generation, the one it bumped to: nothing runs it again but a retry
	OpSweep     = "sweep"     // ok/failed: a reclaim or settle sweep ran; Counts holds its report
)

// The reasons of a refusal. A refusal with any other reason is untyped.
const (
	ReasonTerminal   = "terminal"   // the job was COMPLETED or FAILED (Detail: which)
	ReasonSuperseded = "superseded" // a newer generation owned the job
	ReasonReclaimed  = "reclaimed"  // the start guard refused a reclaimed job
	ReasonNotFound   = "not_found"  // no such job
	ReasonStopped    = "stopped"    // the caller's re-check stopped the operation before any write
	ReasonUnread     = "unread"     // refused, and the read that would say why failed
)

// typedReasons are the reasons a refusal may give.
var typedReasons = map[string]bool{
	ReasonTerminal: true, ReasonSuperseded: true, ReasonReclaimed: true, ReasonNotFound: true, ReasonStopped: true,
	ReasonUnread: true,
}

// Event is one entry of the history.
type Event struct {
	// Seq orders the events as the database appended them. Events of one
	// job written in the transactions that wrote its row follow the order
	// in which those transactions took the row's lock.
	Seq int64
	// Process names who recorded it: "w12" (a worker incarnation),
	// "reclaimer-1", "settler-2", "operator", "driver".
	Process string
	// Call pairs an outcome with its invoke within Process; 0 for an event
	// recorded without an invoke.
	Call int64
	Op   string
	Kind Kind
	// JobID is the job, as the jobs table prints its id; "" for a sweep or
	// a crash.
	JobID string
	// Generation is the attempt the operation belongs to; for a start or a
	// retry, the generation it created; 0 when not known (an invoke of a
	// start).
	Generation int64
	// Reason is a refusal's reason.
	Reason string
	// Detail is free text: an error, a status, the meter of a bill.
	Detail string
	// Counts are a sweep's report.
	Counts map[string]int
	// At is the database's clock when the event was written
	// (clock_timestamp()): for an ok written in its operation's
	// transaction, after every statement of the operation.
	At time.Time
	// TxAt is the database's clock when the event's transaction began
	// (now()): for an ok written in its operation's transaction, before
	// any statement of the operation.
	TxAt time.Time
}

// Schema is the history table. It is append-only: the run only inserts.
const Schema = `
CREATE TABLE history (
    seq        bigserial PRIMARY KEY,
    process    text   NOT NULL,
    call       bigint NOT NULL DEFAULT 0,
    op         text   NOT NULL,
    kind       text   NOT NULL,
    job_id     text   NOT NULL DEFAULT '',
    generation bigint NOT NULL DEFAULT 0,
    reason     text   NOT NULL DEFAULT '',
    detail     text   NOT NULL DEFAULT '',
    counts     jsonb,
    at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    tx_at      timestamptz NOT NULL DEFAULT now()
);
`

const insertSQL = `INSERT INTO history (process, call, op, kind, job_id, generation, reason, detail, counts)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`

// Insert returns the statement that appends e to the history, and its
// arguments. Seq, At and TxAt are the database's.
func (e Event) Insert() (string, []any) {
	var counts []byte
	if e.Counts != nil {
		counts, _ = json.Marshal(e.Counts) // a map of ints always marshals
	}
	return insertSQL, []any{e.Process, e.Call, e.Op, string(e.Kind), e.JobID, e.Generation, e.Reason, e.Detail, counts}
}
