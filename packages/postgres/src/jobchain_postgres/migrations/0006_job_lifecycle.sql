-- 0006_job_lifecycle: the terminal statuses failed and cancelled, the error history, the attempt
-- budget's base, and the record of why a job ended (issue 17, job lifecycle).
--
-- The enum gains two values. ALTER TYPE ... ADD VALUE runs inside the migration transaction
-- (PostgreSQL 12 and later), but a value added to an existing type cannot be used before that
-- transaction commits, so nothing below names 'failed' or 'cancelled' (no partial index or CHECK
-- on them). On a fresh database the type is created in the same transaction, where that rule
-- does not apply; either way the values are usable by every statement after the migration.
ALTER TYPE {job_status} ADD VALUE IF NOT EXISTS 'failed';
ALTER TYPE {job_status} ADD VALUE IF NOT EXISTS 'cancelled';

-- Nullable columns, and two NOT NULL columns with constant defaults: catalog changes only (no
-- table rewrite, PostgreSQL 11 and later), the ACCESS EXCLUSIVE lock held for milliseconds even
-- on a table of millions of jobs. Jobs from before this migration read back with an empty error
-- history, attempt_base 0 (their whole attempt count counts against max_attempts) and
-- runs_after_failed_blockers false (the default policy: they fail with a failed blocker).
-- No new index: the statements that read these columns reach their rows through existing ones
-- (job_listing_status_idx for retention, job_blocker_chain_idx for propagation and redrive of
-- the jobs a chain failed), so the hot path pays no extra index maintenance.
ALTER TABLE {job}
    ADD COLUMN attempt_errors             jsonb,
    ADD COLUMN attempt_base               integer NOT NULL DEFAULT 0,
    ADD COLUMN failed_at                  timestamptz,
    ADD COLUMN cancelled_at               timestamptz,
    ADD COLUMN cancel_reason              text,
    ADD COLUMN failed_by_chain_id         uuid,
    ADD COLUMN runs_after_failed_blockers boolean NOT NULL DEFAULT false;
