-- jobguard: the default jobs table. Plain SQL, safe to run more than once, so
-- any migration tool can apply it. Tables of your own work too: map them with
-- jobguard.Table instead.
CREATE TABLE IF NOT EXISTS jobs (
    id             uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    type           text        NOT NULL,
    status         text        NOT NULL DEFAULT 'QUEUED'
                   CHECK (status IN ('QUEUED', 'PROCESSING', 'COMPLETED', 'FAILED')),
    -- Bumped by every start and every explicit retry: the fencing token that
    -- every later write of an execution carries.
    generation     bigint      NOT NULL DEFAULT 0,
    progress       integer     NOT NULL DEFAULT 0,
    parent_id      text,
    failure_reason text,
    payload        jsonb       NOT NULL DEFAULT '{}',
    -- Start of the current attempt, set by StartGuard.Start.
    started_at     timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    -- Moves only on evidence of progress (heartbeat) and on state changes.
    updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS jobs_active_idx ON jobs (type, started_at)
    WHERE status IN ('QUEUED', 'PROCESSING');
