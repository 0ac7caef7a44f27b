-- settle: every change to a record's attempts moves its claim. Plain SQL,
-- safe to run more than once.
--
-- A sweep's verdict is fenced on the claim it made. A process built before
-- the claim column claims a record by counting attempts alone, and a stopped
-- attempt hands its attempt back by lowering the count: without this
-- trigger the count can return to the number a stale attempt claimed while
-- the claim stays where it was, and that attempt's verdict would match
-- again. With it, a statement that changes attempts and leaves claim as it
-- is takes the next claim number, whichever version sent it; a statement
-- that sets claim itself (the current claim) is left as it is. The claim
-- still only grows.
--
-- The function is created beside the table, in the first schema of the
-- search_path (where CREATE TABLE put it), and reads no table, so it does
-- not depend on the search_path it later runs with. For a table under
-- another name, replace the table's name here too: the function is named
-- after it. The trigger's name is the same on every records table.
CREATE OR REPLACE FUNCTION job_settlements_claim_follows_attempts() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    NEW.claim := OLD.claim + 1;
    RETURN NEW;
END
$$;

-- Created only when missing, so that running the file again never leaves
-- the table without its trigger, even for a moment; a run beside another
-- that created it first finds it there.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                   WHERE tgrelid = 'job_settlements'::regclass AND tgname = 'claim_follows_attempts') THEN
        CREATE TRIGGER claim_follows_attempts BEFORE UPDATE ON job_settlements
            FOR EACH ROW
            WHEN (NEW.attempts IS DISTINCT FROM OLD.attempts AND NEW.claim IS NOT DISTINCT FROM OLD.claim)
            EXECUTE FUNCTION job_settlements_claim_follows_attempts();
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;
