-- compensate: one execution's owed artifacts, in the order they are taken.
-- Plain SQL, safe to run more than once. On a large table already in use,
-- build the index with CREATE INDEX CONCURRENTLY instead, outside a
-- transaction.

-- Compensating one execution (a rejected finalize, CompensateExecution)
-- takes its owed artifacts one at a time, each after the last one's id: this
-- index reaches the next one at once, whatever the number of the
-- execution's artifacts and of the jobs table's owed backlog. Its predicate
-- compares the state under the C collation, as that statement does, so
-- that the statement implies it and not the open artifacts' index's, which
-- would read the jobs table's whole owed backlog to find the execution's.
CREATE INDEX IF NOT EXISTS job_artifacts_owed_idx ON job_artifacts (jobs_table, job_id, generation, id)
    WHERE state COLLATE "C" = 'rejected';
