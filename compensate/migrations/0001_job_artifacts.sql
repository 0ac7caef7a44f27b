-- compensate: the default artifacts table. Plain SQL, safe to run more than
-- once. One row per thing an execution created before its completion, tagged
-- with the execution (job id and generation).
CREATE TABLE IF NOT EXISTS job_artifacts (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id     text        NOT NULL,
    generation bigint      NOT NULL,
    kind       text        NOT NULL,
    ref        text        NOT NULL,
    -- pending: the execution's outcome is open; kept: its completion was
    -- written; rejected: it can no longer complete, compensation is owed;
    -- done: compensated.
    state      text        NOT NULL DEFAULT 'pending'
               CHECK (state IN ('pending', 'kept', 'rejected', 'done')),
    attempts   integer     NOT NULL DEFAULT 0,
    last_error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (job_id, generation, kind, ref)
);

CREATE INDEX IF NOT EXISTS job_artifacts_open_idx ON job_artifacts (state, id)
    WHERE state IN ('pending', 'rejected');
