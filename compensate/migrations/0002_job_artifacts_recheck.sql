-- compensate: a second compensation of every undone artifact, and the lookup
-- of the other records of one thing. Plain SQL, safe to run more than once.

-- When a compensated artifact is compensated once more (NULL: never again),
-- for what its lost execution still had in flight at the first.
ALTER TABLE job_artifacts ADD COLUMN IF NOT EXISTS recheck_at timestamptz;

CREATE INDEX IF NOT EXISTS job_artifacts_recheck_idx ON job_artifacts (id)
    WHERE state = 'done' AND recheck_at IS NOT NULL;

-- Whether another execution still holds the thing an artifact names: one
-- that may complete, or did.
CREATE INDEX IF NOT EXISTS job_artifacts_held_idx ON job_artifacts (kind, ref)
    WHERE state IN ('pending', 'kept');
