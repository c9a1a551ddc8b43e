-- 0004_worker_registry: the worker registry (heartbeats) and the rescue record on jobs.
--
-- worker: one row per worker id, upserted by every heartbeat (worker_heartbeat). type_names
-- is a JSON array of text. state is what the worker last reported (running, draining,
-- stopped) or 'dead' once another worker's heartbeat found its alive_until passed and
-- released its jobs. The table holds one row per live (or recently gone) worker, so its
-- scans stay small; alive_until serves the dead-worker scan and the prune.

CREATE TABLE {p}worker (
    id           TEXT    NOT NULL PRIMARY KEY,
    name         TEXT    NOT NULL,
    host         TEXT    NOT NULL,
    pid          INTEGER NOT NULL,
    version      TEXT    NOT NULL,
    type_names   TEXT    NOT NULL,
    concurrency  INTEGER NOT NULL,
    inflight     INTEGER NOT NULL,
    state        TEXT    NOT NULL CHECK (state IN ('running', 'draining', 'stopped', 'dead')),
    started_at   TEXT    NOT NULL,
    last_seen_at TEXT    NOT NULL,
    alive_until  TEXT    NOT NULL
);

CREATE INDEX {p}worker_alive_until_idx ON {p}worker (alive_until);

-- The last rescue of a job: when, from which worker, and why (lease_expired: the reaper;
-- worker_dead: a heartbeat released a dead worker's jobs). NULL until the job is rescued.
-- No new job index: releasing a dead worker's jobs scans the running jobs through
-- job_expired_lease_idx (few rows), so claims and completions maintain nothing more.
-- ADD COLUMN with no default only rewrites the schema entry; the CHECK makes SQLite read
-- (not rewrite) the existing rows once to test it, and NULL passes.

ALTER TABLE {p}job ADD COLUMN rescued_at TEXT;

ALTER TABLE {p}job ADD COLUMN rescued_from TEXT;

ALTER TABLE {p}job ADD COLUMN rescue_reason TEXT CHECK (rescue_reason IN ('lease_expired', 'worker_dead'));
