-- settle: the default table of finalize records. Plain SQL, safe to run
-- more than once. One row per finalize whose completion committed, written
-- in the completion's own transaction, keyed by the execution (job id and
-- generation): what it still owes and what it will bill.
CREATE TABLE IF NOT EXISTS job_settlements (
    -- The job as the jobs table's id column prints it.
    job_id          text        NOT NULL,
    -- The execution whose completion wrote the record (0 for a jobs table
    -- without a generation column).
    generation      bigint      NOT NULL,
    -- pending: updates or billing still owed; confirmed: every update
    -- succeeded and the usage was billed, in the transaction that set it;
    -- given_up: the settle sweep stopped trying, nothing was billed.
    state           text        NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'confirmed', 'given_up')),
    -- Every update of the finalize, in order: [{"name": ..., "args": ...}].
    updates         jsonb       NOT NULL DEFAULT '[]',
    -- The names of the updates not yet known to have succeeded.
    pending         text[]      NOT NULL DEFAULT '{}',
    -- The usage entries billed on confirmation:
    -- [{"account": ..., "meter": ..., "quantity": ..., "attributes": {...}}].
    usage           jsonb       NOT NULL DEFAULT '[]',
    -- Attempts of the settle sweep so far.
    attempts        integer     NOT NULL DEFAULT 0,
    -- When the sweep may next take the record (the database's clock).
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    settled_at      timestamptz,
    PRIMARY KEY (job_id, generation)
);

-- The sweep reads only the pending records that are due, in order.
CREATE INDEX IF NOT EXISTS job_settlements_due_idx ON job_settlements (next_attempt_at)
    WHERE state = 'pending';
-- What an operator looks at: the records given up.
CREATE INDEX IF NOT EXISTS job_settlements_given_up_idx ON job_settlements (updated_at)
    WHERE state = 'given_up';
