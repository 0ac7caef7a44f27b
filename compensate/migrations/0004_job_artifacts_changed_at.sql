-- compensate: artifacts dated on the database's clock, for retention.
-- Plain SQL, safe to run more than once. On a large table already in use,
-- build the indexes with CREATE INDEX CONCURRENTLY instead, outside a
-- transaction.

-- When the artifact last changed (recorded, kept, owed, compensated,
-- spared), on the database's clock: updated_at is the process's, for an
-- operator to read. Adding the column dates the artifacts already there at
-- the time this file first runs (the default is taken once, without
-- rewriting the table), so that none of them is older than it.
ALTER TABLE job_artifacts ADD COLUMN IF NOT EXISTS changed_at timestamptz NOT NULL DEFAULT statement_timestamp();

-- Every change moves it, whichever version of the library sends the
-- statement. The function is created beside the table, in the first schema
-- of the search_path, and reads no table. For a table under another name,
-- replace the table's name here too: the function is named after it. The
-- trigger's name is the same on every artifacts table.
CREATE OR REPLACE FUNCTION job_artifacts_changed_at() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    NEW.changed_at := statement_timestamp();
    RETURN NEW;
END
$$;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                   WHERE tgrelid = 'job_artifacts'::regclass AND tgname = 'changed_at_follows_changes') THEN
        CREATE TRIGGER changed_at_follows_changes BEFORE UPDATE ON job_artifacts
            FOR EACH ROW EXECUTE FUNCTION job_artifacts_changed_at();
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;

-- The retention sweep (Artifacts.Retention) reads only its own jobs
-- table's finished artifacts, oldest first.
CREATE INDEX IF NOT EXISTS job_artifacts_finished_idx ON job_artifacts (jobs_table, changed_at)
    WHERE state IN ('kept', 'done');

-- Whether any execution's artifact of a thing is still open: owed, or
-- compensated (a late Record or a rejected Finalize makes a done one owed
-- again), or with a recheck to come (pending ones are in
-- job_artifacts_held_idx). A kept artifact is removed only when none is.
CREATE INDEX IF NOT EXISTS job_artifacts_open_ref_idx ON job_artifacts (kind, ref)
    WHERE state IN ('rejected', 'done') OR recheck_at IS NOT NULL;
