-- 0008_scheduling: the scheduling controls (issue 19): priorities, ordered keys, dynamic blockers
-- resolved by any end, type limits and pause, and the registry of periodic schedules.
--
-- Three job columns and one blocker column: a nullable column and constant defaults are catalog
-- changes only (PostgreSQL 11 and later store the default once and never rewrite the table), so
-- the ACCESS EXCLUSIVE lock is held for milliseconds even on a table of millions of jobs. Jobs
-- from before this migration read back with priority 0 and no ordering key; their blockers are
-- resolved by completion only, as before.
ALTER TABLE {job}
    ADD COLUMN priority     smallint NOT NULL DEFAULT 0,
    ADD COLUMN ordering_key text;
ALTER TABLE {job_blocker}
    ADD COLUMN resolves_on_any_end boolean NOT NULL DEFAULT false;

-- One row per ordering key: the chain that took the key last. A new root with the key upserts it
-- (ON CONFLICT DO UPDATE ... RETURNING previous_chain_id): the row lock serializes the creators of
-- one key until they commit, and no other key. Deleting or pruning a key's last chain deletes it.
CREATE TABLE {ordering_key} (
    key               text PRIMARY KEY,
    last_chain_id     uuid NOT NULL,
    previous_chain_id uuid,
    updated_at        timestamptz NOT NULL
) WITH (fillfactor = 50, autovacuum_vacuum_cost_delay = 0);

-- One row per job type that is paused or rate limited (or was: a resumed type keeps its row with
-- paused_at NULL). A claim of a limited type locks its row first (upsert), which serializes the
-- claims of that type; it also keeps the type's fixed rate window there. Updated by every claim
-- of a limited type: fillfactor 50 keeps those updates HOT.
CREATE TABLE {type_control} (
    type_name         text PRIMARY KEY,
    paused_at         timestamptz,
    rate_window_start timestamptz,
    rate_window_count integer NOT NULL DEFAULT 0
) WITH (fillfactor = 50, autovacuum_vacuum_cost_delay = 0);

-- The periodic schedules workers run, upserted by name at worker start and after each tick, so
-- they list without the user's code; rows not seen for a while are deleted (removed from code).
CREATE TABLE {schedule} (
    name          text PRIMARY KEY,
    cron          text NOT NULL,
    timezone      text NOT NULL,
    type_name     text NOT NULL,
    catch_up      boolean NOT NULL,
    worker_name   text NOT NULL,
    registered_at timestamptz NOT NULL,
    last_seen_at  timestamptz NOT NULL,
    last_tick_at  timestamptz,
    last_chain_id uuid,
    next_tick_at  timestamptz
);

-- jobs_acquire: pending jobs with a priority other than 0, per type in priority claim order. Jobs
-- of priority 0 (every job while nobody uses priorities) have no entry, so the plain hot path
-- maintains nothing new; on an upgrade every existing job has priority 0 and the index is empty
-- (building it still reads the table under a SHARE lock, about a second per million jobs; build it
-- beforehand with CREATE INDEX CONCURRENTLY under this name and definition to avoid the wait).
CREATE INDEX IF NOT EXISTS {job_priority_idx} ON {job} (type_name, priority DESC, scheduled_at, created_at, id)
    WHERE status = 'pending' AND priority <> 0;
