-- 0005_job_lifecycle: the terminal statuses 'failed' and 'cancelled', the error history and
-- the lifecycle columns (issue 17). Same column names as PostgreSQL's 0006_job_lifecycle.
--
-- SQLite cannot alter a CHECK constraint, so the job table is rebuilt: a new table with the
-- wider status CHECK and the new columns, every row copied, the old table dropped, the new
-- one renamed, every index recreated. job_blocker is rebuilt with it: its rows reference job
-- rows, and dropping the old job table with foreign keys on would otherwise delete them
-- (ON DELETE CASCADE) or refuse. The new tables reference their own new names, which the
-- renames rewrite to the final ones (SQLite >= 3.26 rewrites references on rename), so the
-- old tables have no dependents left when they are dropped. The whole migration runs in one
-- BEGIN IMMEDIATE transaction: a reader sees the old tables or the new ones, never half.
--
-- New columns:
--   attempt_errors             JSON array of AttemptError.to_json() objects, oldest first, at
--                              most ATTEMPT_ERRORS_KEPT (10); NULL = no entry yet
--   attempt_base               the attempt count when the job was last retried
--   failed_at, cancelled_at    when the job became failed / cancelled (cleared by a retry)
--   cancel_reason              what cancel_chain was given
--   failed_by_chain_id         the blocker chain whose failure (or cancellation) failed this job
--   runs_after_failed_blockers 1 when the job's type runs it after failed blockers (0/1)

CREATE TABLE {p}job_lifecycle (
    id                         TEXT    NOT NULL PRIMARY KEY,
    type_name                  TEXT    NOT NULL,
    chain_id                   TEXT    NOT NULL REFERENCES {p}job_lifecycle (id),
    chain_type_name            TEXT    NOT NULL,
    chain_index                INTEGER NOT NULL CHECK (chain_index >= 0),
    status                     TEXT    NOT NULL
        CHECK (status IN ('blocked', 'pending', 'running', 'completed', 'failed', 'cancelled')),
    input                      TEXT,
    output                     TEXT,
    created_at                 TEXT    NOT NULL,
    scheduled_at               TEXT    NOT NULL,
    attempt                    INTEGER NOT NULL DEFAULT 0,
    last_attempt_at            TEXT,
    last_attempt_error         TEXT,
    leased_by                  TEXT,
    leased_until               TEXT,
    lease_generation           INTEGER NOT NULL DEFAULT 0,
    completed_at               TEXT,
    completed_by               TEXT,
    deduplication_key          TEXT,
    trace_context              TEXT,
    chain_trace_context        TEXT,
    first_attempt_at           TEXT,
    attempt_started_at         TEXT,
    rescued_at                 TEXT,
    rescued_from               TEXT,
    rescue_reason              TEXT CHECK (rescue_reason IN ('lease_expired', 'worker_dead')),
    attempt_errors             TEXT,
    attempt_base               INTEGER NOT NULL DEFAULT 0,
    failed_at                  TEXT,
    cancelled_at               TEXT,
    cancel_reason              TEXT,
    failed_by_chain_id         TEXT,
    runs_after_failed_blockers INTEGER NOT NULL DEFAULT 0 CHECK (runs_after_failed_blockers IN (0, 1)),
    CHECK ((chain_index = 0) = (chain_id = id))
);

-- Roots first: a continuation's chain_id must find its root already copied.
INSERT INTO {p}job_lifecycle (
    id, type_name, chain_id, chain_type_name, chain_index, status, input, output, created_at,
    scheduled_at, attempt, last_attempt_at, last_attempt_error, leased_by, leased_until,
    lease_generation, completed_at, completed_by, deduplication_key, trace_context,
    chain_trace_context, first_attempt_at, attempt_started_at, rescued_at, rescued_from,
    rescue_reason
)
SELECT
    id, type_name, chain_id, chain_type_name, chain_index, status, input, output, created_at,
    scheduled_at, attempt, last_attempt_at, last_attempt_error, leased_by, leased_until,
    lease_generation, completed_at, completed_by, deduplication_key, trace_context,
    chain_trace_context, first_attempt_at, attempt_started_at, rescued_at, rescued_from,
    rescue_reason
FROM {p}job
ORDER BY chain_index, id;

CREATE TABLE {p}job_blocker_lifecycle (
    job_id              TEXT    NOT NULL REFERENCES {p}job_lifecycle (id) ON DELETE CASCADE,
    blocked_by_chain_id TEXT    NOT NULL REFERENCES {p}job_lifecycle (id),
    idx                 INTEGER NOT NULL,
    trace_context       TEXT,
    PRIMARY KEY (job_id, blocked_by_chain_id)
) WITHOUT ROWID;

INSERT INTO {p}job_blocker_lifecycle (job_id, blocked_by_chain_id, idx, trace_context)
SELECT job_id, blocked_by_chain_id, idx, trace_context FROM {p}job_blocker;

-- Children first: nothing references the old job table once the old job_blocker is gone.
DROP TABLE {p}job_blocker;

DROP TABLE {p}job;

ALTER TABLE {p}job_lifecycle RENAME TO {p}job;

ALTER TABLE {p}job_blocker_lifecycle RENAME TO {p}job_blocker;

-- Every index of 0001_initial (less the one 0003 dropped), as it was.
CREATE INDEX {p}job_acquisition_idx ON {p}job (type_name, scheduled_at, created_at, id)
    WHERE status = 'pending';

CREATE UNIQUE INDEX {p}job_chain_index_idx ON {p}job (chain_id, chain_index);

CREATE INDEX {p}job_deduplication_idx ON {p}job (deduplication_key, created_at DESC)
    WHERE deduplication_key IS NOT NULL AND chain_index = 0;

CREATE INDEX {p}job_expired_lease_idx ON {p}job (type_name, leased_until, id)
    WHERE status = 'running' AND leased_until IS NOT NULL;

CREATE INDEX {p}job_blocker_chain_idx ON {p}job_blocker (blocked_by_chain_id);

CREATE INDEX {p}job_chain_listing_idx ON {p}job (created_at DESC) WHERE chain_index = 0;

CREATE INDEX {p}job_listing_idx ON {p}job (created_at DESC);

CREATE INDEX {p}job_listing_type_name_idx ON {p}job (type_name, created_at DESC);

CREATE INDEX {p}job_chain_listing_type_name_idx ON {p}job (chain_type_name, created_at DESC)
    WHERE chain_index = 0;

-- Retention (chains_prune) of failed and cancelled chains, oldest first. Partial indexes on
-- statuses the plain path never writes: a claim or completion leaves them untouched.
-- Completed chains have no such index on purpose (every completion would maintain it): their
-- prune scans the job table.
CREATE INDEX {p}job_failed_idx ON {p}job (failed_at) WHERE status = 'failed';

CREATE INDEX {p}job_cancelled_idx ON {p}job (cancelled_at) WHERE status = 'cancelled';
