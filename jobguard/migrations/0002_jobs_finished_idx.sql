-- jobguard: the finished jobs by type and time, which Batch.History (and
-- reclaim's Suggest) read one index range per type, the latest first.
-- Plain SQL, safe to run more than once. On a large table already in use,
-- build it with CREATE INDEX CONCURRENTLY instead, outside a transaction.
CREATE INDEX IF NOT EXISTS jobs_finished_idx ON jobs (type, updated_at)
    WHERE status IN ('COMPLETED', 'FAILED');
