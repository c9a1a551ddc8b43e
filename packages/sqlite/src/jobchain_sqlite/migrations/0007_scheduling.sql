-- 0007_scheduling: the scheduling controls (issue 19): priorities, ordered keys, blockers
-- resolved by any end, type limits and pause, and the registry of periodic schedules. Same
-- names as PostgreSQL's 0008_scheduling.
--
-- ADD COLUMN with a constant default only rewrites the schema entry, never the table: jobs
-- from before this migration read back with priority 0 and no ordering key, and their
-- blockers are resolved by completion only, as before.

ALTER TABLE {p}job ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;

ALTER TABLE {p}job ADD COLUMN ordering_key TEXT;

-- 1: the blocker chain counts as resolved whatever its terminal status (an ordering key's
-- previous chain; a JobWait with runs_after_failed).
ALTER TABLE {p}job_blocker ADD COLUMN resolves_on_any_end INTEGER NOT NULL DEFAULT 0;

-- One row per ordering key: the chain that took the key last (and the one before it). A new
-- root with the key reads it and upserts it in its write transaction; SQLite's single writer
-- serializes the creators. Deleting or pruning a key's last chain deletes the row.
CREATE TABLE {p}ordering_key (
    key               TEXT NOT NULL PRIMARY KEY,
    last_chain_id     TEXT NOT NULL,
    previous_chain_id TEXT,
    updated_at        TEXT NOT NULL
) WITHOUT ROWID;

-- chains_delete / chains_prune: the key rows whose last chain goes.
CREATE INDEX {p}ordering_key_last_chain_idx ON {p}ordering_key (last_chain_id);

-- One row per job type that is paused or rate limited (or was: a resumed type keeps its row
-- with paused_at NULL). A claim of a rate-limited type adds its claims to the count of the
-- type's current fixed window (rate_window_start), resetting it when the window moved.
CREATE TABLE {p}type_control (
    type_name         TEXT    NOT NULL PRIMARY KEY,
    paused_at         TEXT,
    rate_window_start TEXT,
    rate_window_count INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- The periodic schedules workers run, upserted by name at worker start and after each tick,
-- so they list without the user's code; rows not seen for a while are deleted.
CREATE TABLE {p}schedule (
    name          TEXT    NOT NULL PRIMARY KEY,
    cron          TEXT    NOT NULL,
    timezone      TEXT    NOT NULL,
    type_name     TEXT    NOT NULL,
    catch_up      INTEGER NOT NULL,
    worker_name   TEXT    NOT NULL,
    registered_at TEXT    NOT NULL,
    last_seen_at  TEXT    NOT NULL,
    last_tick_at  TEXT,
    last_chain_id TEXT,
    next_tick_at  TEXT
) WITHOUT ROWID;

-- jobs_acquire: pending jobs with a priority other than 0, per type in priority claim order.
-- Jobs of priority 0 (every job while nobody uses priorities) have no entry, so the plain
-- hot path maintains nothing new; on an upgrade every existing job has priority 0 and the
-- index is empty (CREATE INDEX still reads the table once).
CREATE INDEX {p}job_priority_idx ON {p}job (type_name, priority DESC, scheduled_at, created_at, id)
    WHERE status = 'pending' AND priority <> 0;
