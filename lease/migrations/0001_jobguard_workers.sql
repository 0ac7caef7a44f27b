-- lease: one row per worker process, the lease that says it is alive.
-- Plain SQL, safe to run more than once. A row is written by its own process
-- only; every time in it is the database's clock.
CREATE TABLE IF NOT EXISTS jobguard_workers (
    -- The process's lease id, unique per process start; never reused.
    id         text        PRIMARY KEY CHECK (id <> ''),
    -- Where it runs, for an operator reading the table.
    host       text        NOT NULL,
    pid        integer     NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    -- The last renewal the database executed.
    renewed_at timestamptz NOT NULL DEFAULT now(),
    -- The lease is live while expires_at > now(); a clean shutdown sets it
    -- to the time of the shutdown.
    expires_at timestamptz NOT NULL
);

-- A liveness question about an owner is a primary-key probe. This index
-- serves the questions asked from the other side: which leases ended, and
-- when (a rescue that starts from the workers that died recently, Prune).
CREATE INDEX IF NOT EXISTS jobguard_workers_expires_at ON jobguard_workers (expires_at);
