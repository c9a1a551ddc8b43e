-- 0003_attempt_start: when a job was first claimed and when its current (or last) attempt was
-- claimed. jobs_acquire (both claim modes) sets attempt_started_at on every claim and
-- first_attempt_at on the first one; nothing else changes them. Both stay NULL for a job never
-- claimed, and for jobs claimed before this migration (their claim times were never recorded).
-- Nullable columns without a default: a catalog change only, no table rewrite, and the
-- ACCESS EXCLUSIVE lock is held for milliseconds.
ALTER TABLE {job}
    ADD COLUMN first_attempt_at   timestamptz,
    ADD COLUMN attempt_started_at timestamptz;
