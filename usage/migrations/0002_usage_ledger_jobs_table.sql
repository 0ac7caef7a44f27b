-- usage: the ledger keyed by the jobs table as well as the job, so that any
-- number of jobs tables share it: job 42 of the tasks and job 42 of the
-- exports are two rows, each billed once. Plain SQL, safe to run more than
-- once.

-- The job's jobs table, as jobguard's Guard.TableKey names it: its schema
-- and name as the catalog holds them, each in double quotes
-- ("public"."jobs").
ALTER TABLE usage_ledger ADD COLUMN IF NOT EXISTS jobs_table text;

-- Rows written before this file belong to the jobs table that the setting
-- jobguard.jobs_table names, when it is set (SET jobguard.jobs_table =
-- '"public"."CourseJob"' in the same session, before this file), or else to
-- the table named jobs that the search_path finds: the bundled migration's.
-- When neither names a table, the file stops with an error instead of
-- guessing: a row keyed to another table would let its job be billed
-- again. A table renamed later needs its rows moved along: UPDATE
-- usage_ledger SET jobs_table = <new key> WHERE jobs_table = <old key>.
UPDATE usage_ledger SET jobs_table = k.key
FROM (SELECT coalesce(nullif(current_setting('jobguard.jobs_table', true), ''),
        (SELECT '"' || replace(n.nspname, '"', '""') || '"."' || replace(c.relname, '"', '""') || '"'
         FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE c.oid = to_regclass('jobs'))) AS key) AS k
WHERE usage_ledger.jobs_table IS NULL AND k.key IS NOT NULL;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM usage_ledger WHERE jobs_table IS NULL) THEN
        RAISE EXCEPTION 'usage_ledger has rows whose jobs table is unknown'
            USING HINT = 'SET jobguard.jobs_table to that table''s key, as jobguard.Guard.TableKey names it '
                '(''"public"."CourseJob"''), and run this file again in the same session';
    END IF;
END $$;

ALTER TABLE usage_ledger ALTER COLUMN jobs_table SET NOT NULL;

-- One row per (jobs table, job, meter): the key that makes an accrual
-- happen at most once. A primary key without the jobs table is replaced.
DO $$
DECLARE
    pk name;
BEGIN
    SELECT c.conname INTO pk FROM pg_catalog.pg_constraint c
    WHERE c.conrelid = 'usage_ledger'::regclass AND c.contype = 'p'
      AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                      WHERE a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey) AND a.attname = 'jobs_table');
    IF pk IS NOT NULL THEN
        EXECUTE format('ALTER TABLE usage_ledger DROP CONSTRAINT %I, ADD PRIMARY KEY (jobs_table, job_id, meter)', pk);
    END IF;
END $$;
