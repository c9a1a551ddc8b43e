-- 0001_initial: the job and job_blocker tables and their partial indexes.
-- {p} is the table prefix (default "jobchain_"), substituted by queries.render().
-- Timestamps are fixed-width ISO-8601 UTC text ("2024-01-02T03:04:05.123456Z"), so
-- text order is time order. JSON columns hold JSON text; SQL NULL stands for None.

CREATE TABLE {p}job (
    id                  TEXT    NOT NULL PRIMARY KEY,
    type_name           TEXT    NOT NULL,
    chain_id            TEXT    NOT NULL REFERENCES {p}job (id),
    chain_type_name     TEXT    NOT NULL,
    chain_index         INTEGER NOT NULL CHECK (chain_index >= 0),
    status              TEXT    NOT NULL CHECK (status IN ('blocked', 'pending', 'running', 'completed')),
    input               TEXT,
    output              TEXT,
    created_at          TEXT    NOT NULL,
    scheduled_at        TEXT    NOT NULL,
    attempt             INTEGER NOT NULL DEFAULT 0,
    last_attempt_at     TEXT,
    last_attempt_error  TEXT,
    leased_by           TEXT,
    leased_until        TEXT,
    lease_generation    INTEGER NOT NULL DEFAULT 0,
    completed_at        TEXT,
    completed_by        TEXT,
    deduplication_key   TEXT,
    trace_context       TEXT,
    chain_trace_context TEXT,
    CHECK ((chain_index = 0) = (chain_id = id))
);

CREATE TABLE {p}job_blocker (
    job_id              TEXT    NOT NULL REFERENCES {p}job (id) ON DELETE CASCADE,
    blocked_by_chain_id TEXT    NOT NULL REFERENCES {p}job (id),
    idx                 INTEGER NOT NULL,
    trace_context       TEXT,
    PRIMARY KEY (job_id, blocked_by_chain_id)
) WITHOUT ROWID;

-- jobs_acquire, job_next_available: eligible pending jobs of a type, oldest first. The
-- tie-breakers are in the index so that, per type name, it yields the full acquisition
-- order and a LIMIT stops after a few entries even when thousands are eligible.
CREATE INDEX {p}job_acquisition_idx ON {p}job (type_name, scheduled_at, created_at, id)
    WHERE status = 'pending';

-- continuation deduplication and "last job of a chain" lookups.
CREATE UNIQUE INDEX {p}job_chain_index_idx ON {p}job (chain_id, chain_index);

-- jobs_create deduplication: roots only.
CREATE INDEX {p}job_deduplication_idx ON {p}job (deduplication_key, created_at DESC)
    WHERE deduplication_key IS NOT NULL AND chain_index = 0;

-- jobs_reap_expired: running jobs by lease expiry.
CREATE INDEX {p}job_expired_lease_idx ON {p}job (type_name, leased_until, id)
    WHERE status = 'running' AND leased_until IS NOT NULL;

-- unblocking, blocked_jobs_list, chains_delete: who is blocked by a chain.
CREATE INDEX {p}job_blocker_chain_idx ON {p}job_blocker (blocked_by_chain_id);

-- listings.
CREATE INDEX {p}job_chain_listing_idx ON {p}job (created_at DESC) WHERE chain_index = 0;
CREATE INDEX {p}job_listing_idx ON {p}job (created_at DESC);
CREATE INDEX {p}job_listing_status_idx ON {p}job (status, created_at DESC);
CREATE INDEX {p}job_listing_type_name_idx ON {p}job (type_name, created_at DESC);
CREATE INDEX {p}job_chain_listing_type_name_idx ON {p}job (chain_type_name, created_at DESC)
    WHERE chain_index = 0;
