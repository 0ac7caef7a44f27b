package chaos

import "github.com/jobguard/jobguard/internal/testkit/history"

// Schema is the SQL of the run's own tables, applied after the jobs table
// (jobguard.Migration) and the usage ledger (usage.Migration):
//
//   - the product tables a chapter job and a video job write (courses,
//     chapters, lessons; videos, contents; accounts billed per video);
//   - queue, a small visibility-timeout queue: a worker claims a row with
//     FOR UPDATE SKIP LOCKED and pushes its visible_at a lease ahead, so a
//     killed worker's job is delivered again once the lease runs out;
//   - job_audit and parent_audit, append-only histories filled by deferred
//     triggers, so the invariants are checked from what really happened.
//     The triggers run at commit and read two transaction-local settings
//     that every writer of the run sets: chaos.actor (start, worker,
//     reclaim, retry, cancel; rescue, a session setting of the
//     reclaimers' connections, which their reclaims override) and
//     chaos.writer_gen (the generation of the execution that wrote). A
//     write with no actor is itself a violation. The job's owner (its
//     worker's lease id) is recorded before and after, and a rescue's
//     history event is written by the trigger, in the rescue's
//     transaction, which also makes the job's queue row visible again;
//   - history (package history): one event per operation of every
//     process, written as it happens, for the independent checker;
//   - events, kills, stops and confirmed: what the workers and the run's
//     driver saw (refusals, rejected completions, killed worker
//     incarnations, incarnations stopped past their lease and continued,
//     finalizes the worker saw confirmed, recorded right after Finalize
//     returned).
//
// The finalize records (settle.Migration) and the ledger (usage.Migration)
// come before it.
const Schema = `
CREATE TABLE courses (
    id     text PRIMARY KEY,
    status text NOT NULL DEFAULT 'GENERATING',
    weeks  int  NOT NULL DEFAULT 0
);
CREATE TABLE chapters (
    id         bigserial PRIMARY KEY,
    course_id  text   NOT NULL,
    job_id     uuid   NOT NULL,
    generation bigint NOT NULL,
    txid       bigint NOT NULL DEFAULT txid_current()
);
CREATE TABLE lessons (
    id         bigserial PRIMARY KEY,
    chapter_id bigint NOT NULL,
    job_id     uuid   NOT NULL,
    generation bigint NOT NULL
);
CREATE TABLE videos (
    id         text PRIMARY KEY,
    status     text NOT NULL DEFAULT 'ENCODING',
    account    text NOT NULL,
    seconds_ms bigint,
    asset_ok   boolean NOT NULL DEFAULT false
);
CREATE TABLE contents (
    video_id   text PRIMARY KEY,
    published  boolean NOT NULL DEFAULT false
);
CREATE TABLE accounts (
    id       text PRIMARY KEY,
    video_ms bigint NOT NULL DEFAULT 0
);

CREATE TABLE queue (
    job_id     uuid PRIMARY KEY,
    visible_at timestamptz NOT NULL DEFAULT now(),
    deliveries int NOT NULL DEFAULT 0,
    -- Set by every claim: only the delivery that holds it may remove or
    -- release the row, so a late worker cannot drop a later delivery.
    token      uuid
);
CREATE INDEX queue_visible_idx ON queue (visible_at);

CREATE TABLE job_audit (
    seq         bigserial PRIMARY KEY,
    job_id      uuid   NOT NULL,
    parent_id   text,
    old_status  text   NOT NULL,
    new_status  text   NOT NULL,
    old_gen     bigint NOT NULL,
    new_gen     bigint NOT NULL,
    new_reason  text,
    old_owner   text,
    new_owner   text,
    actor       text,
    writer_gen  bigint,
    txid        bigint NOT NULL,
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE parent_audit (
    seq        bigserial PRIMARY KEY,
    parent     text NOT NULL,
    parent_id  text NOT NULL,
    old_status text NOT NULL,
    new_status text NOT NULL,
    actor      text,
    txid       bigint NOT NULL
);

CREATE FUNCTION chaos_actor() RETURNS text LANGUAGE sql AS
$$ SELECT nullif(current_setting('chaos.actor', true), '') $$;

CREATE FUNCTION chaos_job_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_audit (job_id, parent_id, old_status, new_status, old_gen, new_gen, new_reason, old_owner, new_owner,
                           actor, writer_gen, txid)
    VALUES (NEW.id, NEW.parent_id, OLD.status, NEW.status, OLD.generation, NEW.generation, NEW.failure_reason,
            OLD.lease_id, NEW.lease_id,
            chaos_actor(), nullif(current_setting('chaos.writer_gen', true), '')::bigint, txid_current());
    -- The rescue is one statement of the library's, with no hook of the
    -- run's: its history event is written here, in its transaction, so it
    -- exists exactly when the rescue committed.
    -- The queue then delivers the rescued job again at once, as a queue
    -- that reads the jobs table would: its old delivery's token no longer
    -- matches once it is claimed again.
    IF chaos_actor() = 'rescue' THEN
        INSERT INTO history (process, op, kind, job_id, generation, detail)
        VALUES (coalesce(current_setting('chaos.process', true), ''), 'rescue', 'ok', NEW.id::text, NEW.generation,
                coalesce(OLD.lease_id, ''));
        UPDATE queue SET visible_at = now() WHERE job_id = NEW.id;
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER jobs_audit AFTER UPDATE ON jobs
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION chaos_job_audit();

CREATE FUNCTION chaos_parent_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A reclaim is recorded even when the parent was FAILED already, so
    -- every reclaim can be matched with its parent's write.
    IF OLD.status IS DISTINCT FROM NEW.status OR chaos_actor() = 'reclaim' THEN
        INSERT INTO parent_audit (parent, parent_id, old_status, new_status, actor, txid)
        VALUES (TG_TABLE_NAME, NEW.id, OLD.status, NEW.status, chaos_actor(), txid_current());
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER courses_audit AFTER UPDATE ON courses
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION chaos_parent_audit();
CREATE CONSTRAINT TRIGGER videos_audit AFTER UPDATE ON videos
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION chaos_parent_audit();

-- The invariant checks join these on every run; a soak holds tens of
-- thousands of jobs.
CREATE INDEX ON jobs (parent_id);
CREATE INDEX ON chapters (course_id);
CREATE INDEX ON chapters (job_id);
CREATE INDEX ON lessons (chapter_id);
CREATE INDEX ON lessons (job_id);
CREATE INDEX ON job_audit (job_id, new_status);
CREATE INDEX ON job_audit (txid);
CREATE INDEX ON parent_audit (txid);

CREATE TABLE events (
    seq         bigserial PRIMARY KEY,
    kind        text   NOT NULL,
    job_id      uuid,
    generation  bigint,
    incarnation int    NOT NULL,
    detail      text,
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX ON events (job_id, generation);
CREATE TABLE kills (
    incarnation     int PRIMARY KEY,
    mid_transaction boolean NOT NULL,
    at              timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE stops (
    incarnation  int PRIMARY KEY,
    stopped_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    continued_at timestamptz
);
CREATE TABLE confirmed (
    job_id      uuid   NOT NULL,
    generation  bigint NOT NULL,
    incarnation int    NOT NULL,
    PRIMARY KEY (job_id, generation)
);
` + history.Schema

// Event kinds the workers record.
const (
	EventStartRefused  = "start_refused"  // Start refused the job (reclaimed or terminal)
	EventStartError    = "start_error"    // Start failed (database or Redis trouble)
	EventLateRejected  = "late_rejected"  // a completion refused because the job was FAILED (reclaimed)
	EventStaleRefused  = "stale_refused"  // a write refused because a newer generation owns the job
	EventOtherRejected = "other_rejected" // a completion refused for another reason (already completed)
	EventHeartbeatLost = "heartbeat_lost" // a heartbeat found the job no longer this execution's
	EventSaving        = "saving"         // the worker is about to save its result (CompleteTx or Finalize)
	EventSaveError     = "save_error"     // the save failed (terminated connection, ...); redelivered
	EventCompleted     = "completed"      // the completion committed
	EventUnsettled     = "unsettled"      // a finalize completed but an update or its billing failed: left to the settle sweep
	EventStopped       = "stopped"        // the re-check stopped the finalize; the job was failed
	EventAccrued       = "accrued"        // the worker's finalize billed its usage
	EventCancelled     = "cancelled"      // the watcher cancelled the execution's call; detail: how it learned (notice, check)
	EventLeaseLost     = "lease_lost"     // the worker process's lease ended (no job); detail: why. It starts nothing more and exits
)
