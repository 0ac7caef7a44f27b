-- reclaim: how each job type is reclaimed. 'reclaim' fails the jobs over
-- their limit without progress; 'shadow' decides, counts and logs them as
-- would-reclaim and writes nothing; 'off' never reclaims them automatically
-- (counted as paused). Plain SQL, safe to run more than once.
ALTER TABLE job_type_limits ADD COLUMN IF NOT EXISTS mode text NOT NULL DEFAULT 'reclaim';

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_constraint
                   WHERE conrelid = 'job_type_limits'::regclass AND conname = 'job_type_limits_mode_check') THEN
        ALTER TABLE job_type_limits ADD CONSTRAINT job_type_limits_mode_check
            CHECK (mode IN ('reclaim', 'shadow', 'off'));
    END IF;
END
$$;
