-- usage: the default ledger. Plain SQL, safe to run more than once. One row
-- per (job, meter): the primary key is what makes an accrual happen at most
-- once, however often a finalize is replayed.
CREATE TABLE IF NOT EXISTS usage_ledger (
    job_id      text        NOT NULL,
    meter       text        NOT NULL,
    -- The execution whose confirmed finalize accrued the usage.
    generation  bigint      NOT NULL,
    account     text        NOT NULL,
    quantity    bigint      NOT NULL CHECK (quantity >= 0),
    -- Optional details for auditing (duration, resolution, model, ...).
    attributes  jsonb,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, meter)
);

CREATE INDEX IF NOT EXISTS usage_ledger_account_idx ON usage_ledger (account, recorded_at);
