-- settle: settled records dated for retention. Plain SQL, safe to run more
-- than once. On a large table already in use, build the index with CREATE
-- INDEX CONCURRENTLY instead, outside a transaction.

-- settled_at is when a record settled, on the database's clock: set by a
-- confirmation and, from this version on, by giving a record up (Reopen
-- clears it). Records given up before this file have none: they are dated
-- by their last change, which is when they were given up. A process of an
-- earlier version, still running beside a newer one, gives records up
-- without a date: run this file again once every process is upgraded.
UPDATE job_settlements SET settled_at = updated_at
WHERE state IN ('confirmed', 'given_up') AND settled_at IS NULL;

-- The retention sweep (Settler.Retention) reads only its own jobs table's
-- settled records, oldest first, and no pending one.
CREATE INDEX IF NOT EXISTS job_settlements_settled_idx ON job_settlements (jobs_table, settled_at)
    WHERE state IN ('confirmed', 'given_up');
