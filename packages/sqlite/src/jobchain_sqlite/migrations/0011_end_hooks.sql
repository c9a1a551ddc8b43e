-- 0011_end_hooks: failure and cancel hooks (issue 37, deliver 3; contracts/end_hooks.py).
-- Same table name as PostgreSQL's.
--
-- A new table and a trigger: existing rows are untouched, and no job that ended before this
-- migration starts a hook.
--
-- {p}type_hook holds one row per job type, upserted by end_hooks_register when a worker
-- starts: the type's hooks (hook type names; NULL: none) and its default priority, which a
-- hook job of that type is created with.
CREATE TABLE {p}type_hook (
    type_name          TEXT    NOT NULL PRIMARY KEY,
    priority           INTEGER NOT NULL DEFAULT 0,
    on_failed          TEXT,
    on_cancelled       TEXT,
    on_chain_failed    TEXT,
    on_chain_cancelled TEXT,
    registered_at      TEXT    NOT NULL
) WITHOUT ROWID;

-- The rule: whatever sets a job's failed_at (status 'failed') or cancelled_at (status
-- 'cancelled') starts, in that same statement, one pending root job per hook that applies:
-- the on_failed / on_cancelled of the job's type_name (scope 'job') and the on_chain_failed /
-- on_chain_cancelled of its chain_type_name (scope 'chain'), with jobchain.JobEnded as input.
-- Every operation that ends a job sets the column by UPDATE: job_fail, chains_cancel,
-- jobs_propagate, job_wait, and jobs_create_extras (a job created against a blocker chain that
-- already ended badly is inserted 'failed' with failed_at NULL, then given failed_at by that
-- UPDATE, which fires this trigger once). A retry clears both columns, so a job failing again
-- starts its hook again; a rewrite of an ended row (the column already set) starts nothing.
--
-- Cost on the plain path: none. UPDATE OF names the two columns, so SQLite compiles the
-- trigger only into statements whose SET names one of them: the claim, renewal, reschedule,
-- completion and reap statements are the same bytecode as before this migration
-- (test_end_hooks_migration checks it). There is deliberately no INSERT trigger, since no
-- insert of this library writes either column. Any trigger on INSERT makes SQLite stage every
-- INSERT ... SELECT in a temporary table and call the trigger program once per row, even when
-- its WHEN is false: measured, about +10 % CPU time for a one-job jobs_create and +7 % per job
-- of a 100-job batch (20,000 jobs into an in-memory database).
--
-- The body: json_each over two new ids (0: scope 'job', 1: scope 'chain'), CROSS JOIN (so it
-- is the outer loop) the owner's {p}type_hook row by primary key, then the hook type's own
-- row (its priority; 0 without one) by primary key. The ids come from a table-valued
-- function's rows, so id and chain_id read the same value: a random expression in a
-- subquery would be copied into both columns by the query flattener and drawn twice (and
-- CREATE TRIGGER allows no WITH clause to materialize it). An id is a canonical lowercase
-- UUID, version 4 (122 random bits).
--
-- JobEnded.at is written as every backend writes it (UTC, microseconds, "+00:00"): the stored
-- time's fixed-width text with its "Z" spelled out.
--
-- If a later migration rebuilds {p}job, it must create this trigger again.
CREATE TRIGGER {p}job_end_hooks
AFTER UPDATE OF failed_at, cancelled_at ON {p}job
WHEN (NEW.status = 'failed' AND OLD.failed_at IS NULL AND NEW.failed_at IS NOT NULL)
  OR (NEW.status = 'cancelled' AND OLD.cancelled_at IS NULL AND NEW.cancelled_at IS NOT NULL)
BEGIN
    INSERT INTO {p}job (
        id, type_name, chain_id, chain_type_name, chain_index, status, input, created_at,
        scheduled_at, priority
    )
    SELECT e.id, e.hook, e.id, e.hook, 0, 'pending',
           json_object(
               'event', NEW.status,
               'scope', e.scope,
               'job_id', NEW.id,
               'type_name', NEW.type_name,
               'chain_id', NEW.chain_id,
               'chain_type_name', NEW.chain_type_name,
               'at', replace(e.at, 'Z', '+00:00'),
               'error', CASE NEW.status WHEN 'failed' THEN NEW.last_attempt_error END,
               'error_type', CASE NEW.status WHEN 'failed'
                   THEN json_extract(NEW.attempt_errors, '$[#-1].error_type') END,
               'reason', CASE NEW.status WHEN 'cancelled' THEN NEW.cancel_reason END,
               'failed_by_chain_id', CASE NEW.status WHEN 'failed' THEN NEW.failed_by_chain_id END
           ),
           e.at, e.at, COALESCE(t.priority, 0)
    FROM (
        SELECT r.value AS id,
               CASE r.key WHEN 0 THEN 'job' ELSE 'chain' END AS scope,
               CASE NEW.status WHEN 'failed' THEN NEW.failed_at ELSE NEW.cancelled_at END AS at,
               CASE WHEN r.key = 0 AND NEW.status = 'failed' THEN o.on_failed
                    WHEN r.key = 0 THEN o.on_cancelled
                    WHEN NEW.status = 'failed' THEN o.on_chain_failed
                    ELSE o.on_chain_cancelled END AS hook
        FROM json_each(json_array(
                 lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4'
                     || substr(lower(hex(randomblob(2))), 2) || '-' || substr('89ab', 1 + (random() & 3), 1)
                     || substr(lower(hex(randomblob(2))), 2) || '-' || lower(hex(randomblob(6))),
                 lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4'
                     || substr(lower(hex(randomblob(2))), 2) || '-' || substr('89ab', 1 + (random() & 3), 1)
                     || substr(lower(hex(randomblob(2))), 2) || '-' || lower(hex(randomblob(6)))
             )) AS r
        CROSS JOIN {p}type_hook AS o
            ON o.type_name = CASE r.key WHEN 0 THEN NEW.type_name ELSE NEW.chain_type_name END
    ) AS e
    LEFT JOIN {p}type_hook AS t ON t.type_name = e.hook
    WHERE e.hook IS NOT NULL;
END;
