-- compensate: the artifacts keyed by the jobs table as well as the
-- execution, so that any number of jobs tables share the artifacts table:
-- an artifact of export 42 is never kept, owed or compensated by what
-- happened to task 42. Plain SQL, safe to run more than once.

-- The job's jobs table, as jobguard's Guard.TableKey names it: its schema
-- and name as the catalog holds them, each in double quotes
-- ("public"."jobs").
ALTER TABLE job_artifacts ADD COLUMN IF NOT EXISTS jobs_table text;

-- Artifacts recorded before this file belong to the jobs table that the
-- setting jobguard.jobs_table names, when it is set (SET
-- jobguard.jobs_table = '"public"."CourseJob"' in the same session, before
-- this file), or else to the table named jobs that the search_path finds:
-- the bundled migration's. When neither names a table, the file stops with
-- an error instead of guessing: an artifact keyed to another table would
-- be kept or compensated by another job's outcome. A table renamed later
-- needs its artifacts moved along: UPDATE job_artifacts SET jobs_table =
-- <new key> WHERE jobs_table = <old key>.
UPDATE job_artifacts SET jobs_table = k.key
FROM (SELECT coalesce(nullif(current_setting('jobguard.jobs_table', true), ''),
        (SELECT '"' || replace(n.nspname, '"', '""') || '"."' || replace(c.relname, '"', '""') || '"'
         FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE c.oid = to_regclass('jobs'))) AS key) AS k
WHERE job_artifacts.jobs_table IS NULL AND k.key IS NOT NULL;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM job_artifacts WHERE jobs_table IS NULL) THEN
        RAISE EXCEPTION 'job_artifacts has artifacts whose jobs table is unknown'
            USING HINT = 'SET jobguard.jobs_table to that table''s key, as jobguard.Guard.TableKey names it '
                '(''"public"."CourseJob"''), and run this file again in the same session';
    END IF;
END $$;

ALTER TABLE job_artifacts ALTER COLUMN jobs_table SET NOT NULL;

-- One row per (jobs table, execution, kind, ref). A unique key without the
-- jobs table is replaced.
DO $$
DECLARE
    uk name;
BEGIN
    SELECT c.conname INTO uk FROM pg_catalog.pg_constraint c
    WHERE c.conrelid = 'job_artifacts'::regclass AND c.contype = 'u'
      AND (SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_catalog.pg_attribute a
           WHERE a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)) = ARRAY['generation', 'job_id', 'kind', 'ref'];
    IF uk IS NOT NULL THEN
        EXECUTE format('ALTER TABLE job_artifacts DROP CONSTRAINT %I, ADD UNIQUE (jobs_table, job_id, generation, kind, ref)', uk);
    END IF;
END $$;

-- A sweep reads only its own jobs table's open artifacts, and its own
-- rechecks: both indexes lead with the jobs table. They keep their names,
-- so that the earlier files, run again, find them and build nothing.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_index i
                   JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                   WHERE i.indexrelid = to_regclass('job_artifacts_open_idx') AND a.attname = 'jobs_table') THEN
        DROP INDEX IF EXISTS job_artifacts_open_idx;
        CREATE INDEX job_artifacts_open_idx ON job_artifacts (jobs_table, state, id)
            WHERE state IN ('pending', 'rejected');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_index i
                   JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                   WHERE i.indexrelid = to_regclass('job_artifacts_recheck_idx') AND a.attname = 'jobs_table') THEN
        DROP INDEX IF EXISTS job_artifacts_recheck_idx;
        CREATE INDEX job_artifacts_recheck_idx ON job_artifacts (jobs_table, id)
            WHERE state = 'done' AND recheck_at IS NOT NULL;
    END IF;
END $$;
