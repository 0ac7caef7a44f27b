-- jobguard: the table of reclaim markers, for Shared.Markers =
-- MarkersPostgres. Plain SQL, safe to run more than once. It creates no
-- jobs table, so it applies beside a jobs table of your own. Put it where
-- the search_path of the processes that build their guards finds it.
--
-- One row per job: the reclaimer writes it in the reclaim's own
-- transaction, and the start guard refuses a job whose marker is live for
-- its current generation or a later one.
CREATE TABLE IF NOT EXISTS job_reclaim_markers (
    -- The job's jobs table, as jobguard's Guard.TableKey names it: its
    -- schema and name as the catalog holds them, each in double quotes
    -- ("public"."jobs"), so that several jobs tables share this one.
    jobs_table   text        NOT NULL,
    -- The job as the jobs table's id column prints it (Guard.CanonicalID).
    job_id       text        NOT NULL,
    -- The generation of the execution that was reclaimed. A write never
    -- lowers it while the marker is live.
    generation   bigint      NOT NULL CHECK (generation >= 0),
    reason       text        NOT NULL,
    -- When the reclaim wrote the marker, and when it stops counting, both
    -- on the database's clock. Reads ignore a row past expires_at; the
    -- retention sweep (package retain, 'jobguard retain') deletes such
    -- rows a day after, by the index below.
    reclaimed_at timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (jobs_table, job_id)
);

CREATE INDEX IF NOT EXISTS job_reclaim_markers_expires_idx ON job_reclaim_markers (expires_at);
