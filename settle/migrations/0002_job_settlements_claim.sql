-- settle: the fencing token of a sweep's verdict. Plain SQL, safe to run
-- more than once.

-- The number of the latest claim of the record by a settle sweep. Every
-- claim takes the next one, and nothing ever lowers it: Reopen starts
-- attempts over and a stopped attempt hands its attempt back, but the claim
-- only grows, so a verdict conditional on it holds only for the attempt
-- that made the claim, never for a later attempt that happens to have the
-- same number. Records written before this column existed start at 0.
ALTER TABLE job_settlements ADD COLUMN IF NOT EXISTS claim bigint NOT NULL DEFAULT 0;
