-- reclaim: the per-type runtime limits the reclaimer reads at every sweep.
-- Plain SQL, safe to run more than once. Change a limit with an UPDATE; the
-- next sweep uses it, no restart needed.
CREATE TABLE IF NOT EXISTS job_type_limits (
    job_type    text     PRIMARY KEY,
    -- The longest the current attempt of a job of this type may run before it
    -- can be reclaimed (it must also have stopped making progress).
    max_runtime interval NOT NULL CHECK (max_runtime > interval '0')
);
