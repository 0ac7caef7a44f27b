-- settle: the records keyed by the jobs table as well as the execution, so
-- that any number of jobs tables share the records table: job 42 of the
-- tasks and job 42 of the exports each have their own record, and each
-- Settler sweeps its own table's. Plain SQL, safe to run more than once.

-- The job's jobs table, as jobguard's Guard.TableKey names it: its schema
-- and name as the catalog holds them, each in double quotes
-- ("public"."jobs").
ALTER TABLE job_settlements ADD COLUMN IF NOT EXISTS jobs_table text;

-- Records written before this file belong to the jobs table that the
-- setting jobguard.jobs_table names, when it is set (SET jobguard.jobs_table
-- = '"public"."CourseJob"' in the same session, before this file), or else
-- to the table named jobs that the search_path finds: the bundled
-- migration's. When neither names a table, the file stops with an error
-- instead of guessing: a record keyed to another table would be settled
-- against that table's job, or never. A table renamed later needs its
-- records moved along: UPDATE job_settlements SET jobs_table = <new key>
-- WHERE jobs_table = <old key>.
UPDATE job_settlements SET jobs_table = k.key
FROM (SELECT coalesce(nullif(current_setting('jobguard.jobs_table', true), ''),
        (SELECT '"' || replace(n.nspname, '"', '""') || '"."' || replace(c.relname, '"', '""') || '"'
         FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE c.oid = to_regclass('jobs'))) AS key) AS k
WHERE job_settlements.jobs_table IS NULL AND k.key IS NOT NULL;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM job_settlements WHERE jobs_table IS NULL) THEN
        RAISE EXCEPTION 'job_settlements has records whose jobs table is unknown'
            USING HINT = 'SET jobguard.jobs_table to that table''s key, as jobguard.Guard.TableKey names it '
                '(''"public"."CourseJob"''), and run this file again in the same session';
    END IF;
END $$;

ALTER TABLE job_settlements ALTER COLUMN jobs_table SET NOT NULL;

-- One record per (jobs table, job, generation). A primary key without the
-- jobs table is replaced.
DO $$
DECLARE
    pk name;
BEGIN
    SELECT c.conname INTO pk FROM pg_catalog.pg_constraint c
    WHERE c.conrelid = 'job_settlements'::regclass AND c.contype = 'p'
      AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                      WHERE a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey) AND a.attname = 'jobs_table');
    IF pk IS NOT NULL THEN
        EXECUTE format('ALTER TABLE job_settlements DROP CONSTRAINT %I, ADD PRIMARY KEY (jobs_table, job_id, generation)', pk);
    END IF;
END $$;

-- A sweep reads only its own jobs table's pending records that are due, in
-- order: the due index leads with the jobs table. It keeps its name, so
-- that the first file, run again, finds it and builds nothing.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_index i
                   JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                   WHERE i.indexrelid = to_regclass('job_settlements_due_idx') AND a.attname = 'jobs_table') THEN
        DROP INDEX IF EXISTS job_settlements_due_idx;
        CREATE INDEX job_settlements_due_idx ON job_settlements (jobs_table, next_attempt_at)
            WHERE state = 'pending';
    END IF;
END $$;
