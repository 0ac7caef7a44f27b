-- jobguard: the worker process that runs each job's current execution (its
-- lease id, package lease), written by StartGuard.Start and cleared by Retry
-- and by the reclaimer's rescue. The index holds only the running jobs that
-- a process claims, which the rescue reads, in id order and a page at a
-- time, to find those whose worker's lease lapsed. Plain SQL, safe to run
-- more than once. On a large table already in use, build the index with
-- CREATE INDEX CONCURRENTLY instead, outside a transaction.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS lease_id text;

CREATE INDEX IF NOT EXISTS jobs_owned_idx ON jobs (id)
    WHERE status = 'PROCESSING' AND lease_id IS NOT NULL;
