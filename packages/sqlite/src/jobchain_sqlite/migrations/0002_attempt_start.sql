-- 0002_attempt_start: when a job was first claimed and when its current (or last) attempt
-- was claimed. jobs_acquire sets attempt_started_at on every claim and first_attempt_at on
-- the first one; nothing else changes them. Both stay NULL for a job never claimed (and for
-- jobs claimed before this migration: their first claim time was never recorded).
-- ADD COLUMN with no default only rewrites the schema entry, not the table.

ALTER TABLE {p}job ADD COLUMN first_attempt_at TEXT;

ALTER TABLE {p}job ADD COLUMN attempt_started_at TEXT;
