-- 0013_end_hooks: failure and cancel hooks (issue 37, deliver 3; the rule is stated in
-- jobchain.contracts.end_hooks).
--
-- A new table, one trigger function and two row triggers on the job table. Existing rows are
-- untouched: no column is added and nothing is rewritten; CREATE TRIGGER holds a SHARE ROW
-- EXCLUSIVE lock on the job table for a moment (reads go on). Jobs that failed or were cancelled
-- before this migration start nothing; a hook fires only for a change made after it.

-- One row per job type, upserted by every worker at start (sql/end_hooks_register.sql): the hook
-- types a failure or a cancellation of a job of that type (or of a chain of that type) starts,
-- and the type's default claim priority, which a hook job of that type gets. A row without hooks
-- stays: it is how a hook removed from the code is forgotten.
CREATE TABLE {type_hook} (
    type_name          text PRIMARY KEY,
    priority           smallint NOT NULL DEFAULT 0,
    on_failed          text,
    on_cancelled       text,
    on_chain_failed    text,
    on_chain_cancelled text,
    registered_at      timestamptz NOT NULL
);

-- The rule, in the statement that ends the job: one pending root job per hook that applies, the
-- job's type's on_failed/on_cancelled (scope 'job') and its chain type's
-- on_chain_failed/on_chain_cancelled (scope 'chain'), created and scheduled at failed_at /
-- cancelled_at, with the JSON of jobchain.JobEnded as input. The triggers' WHEN clauses let only
-- a job that just failed or was just cancelled reach it. Every name is schema-qualified and
-- search_path is fixed, so a caller's search_path cannot redirect it; status is compared as
-- text because an upgrade from before 0006 runs this in the transaction that added 'failed' and
-- 'cancelled' to the enum, which cannot use those values yet.
CREATE FUNCTION {job_end_hooks}() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ended_failed boolean;
    ended_at     timestamptz;
BEGIN
    IF NEW.status::text = 'failed' AND NEW.failed_at IS NOT NULL THEN
        ended_failed := true;
        ended_at := NEW.failed_at;
    ELSIF NEW.status::text = 'cancelled' AND NEW.cancelled_at IS NOT NULL THEN
        ended_failed := false;
        ended_at := NEW.cancelled_at;
    ELSE
        RETURN NULL;
    END IF;
    INSERT INTO {job} (
        id, chain_id, type_name, chain_type_name, chain_index, status, input, created_at,
        scheduled_at, priority
    )
    SELECT h.id, h.id, h.hook, h.hook, 0, 'pending'::{job_status},
        jsonb_build_object(
            'event', CASE WHEN ended_failed THEN 'failed' ELSE 'cancelled' END,
            'scope', h.scope,
            'job_id', NEW.id,
            'type_name', NEW.type_name,
            'chain_id', NEW.chain_id,
            'chain_type_name', NEW.chain_type_name,
            'at', to_char(ended_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'),
            'error', CASE WHEN ended_failed THEN NEW.last_attempt_error END,
            'error_type', CASE WHEN ended_failed THEN NEW.attempt_errors -> -1 ->> 'error_type' END,
            'reason', CASE WHEN ended_failed THEN NULL ELSE NEW.cancel_reason END,
            'failed_by_chain_id', CASE WHEN ended_failed THEN NEW.failed_by_chain_id END
        ),
        ended_at, ended_at, COALESCE(p.priority, 0)
    FROM (
        SELECT gen_random_uuid() AS id, 'job' AS scope, 1 AS ord,
            CASE WHEN ended_failed THEN t.on_failed ELSE t.on_cancelled END AS hook
        FROM {type_hook} AS t
        WHERE t.type_name = NEW.type_name
        UNION ALL
        SELECT gen_random_uuid(), 'chain', 2,
            CASE WHEN ended_failed THEN t.on_chain_failed ELSE t.on_chain_cancelled END
        FROM {type_hook} AS t
        WHERE t.type_name = NEW.chain_type_name
    ) AS h
    LEFT JOIN {type_hook} AS p ON p.type_name = h.hook
    WHERE h.hook IS NOT NULL
    ORDER BY h.ord;
    RETURN NULL;
END
$$;

-- failed_at or cancelled_at set by an update (job_fail, chains_cancel, propagation, job_wait):
-- only a change from NULL with the matching status queues a trigger event, so claims, renewals,
-- reschedules, completions and retries (which clear both) never do.
CREATE TRIGGER {job_end_hooks_update}
    AFTER UPDATE OF failed_at, cancelled_at ON {job}
    FOR EACH ROW
    WHEN ((OLD.failed_at IS NULL AND NEW.failed_at IS NOT NULL AND NEW.status::text = 'failed')
        OR (OLD.cancelled_at IS NULL AND NEW.cancelled_at IS NOT NULL AND NEW.status::text = 'cancelled'))
    EXECUTE FUNCTION {job_end_hooks}();

-- A job inserted as failed (jobs_create against a blocker chain that already failed or was
-- cancelled).
CREATE TRIGGER {job_end_hooks_insert}
    AFTER INSERT ON {job}
    FOR EACH ROW
    WHEN (NEW.failed_at IS NOT NULL OR NEW.cancelled_at IS NOT NULL)
    EXECUTE FUNCTION {job_end_hooks}();
