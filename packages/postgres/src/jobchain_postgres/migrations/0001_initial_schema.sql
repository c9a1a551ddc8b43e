-- 0001_initial_schema: the status enum, the job and job_blocker tables and their partial indexes.
-- Placeholders in braces are schema-qualified names rendered by jobchain_postgres._identifiers.

CREATE TYPE {job_status} AS ENUM ('blocked', 'pending', 'running', 'completed');

CREATE TABLE {job} (
    id                  uuid PRIMARY KEY,
    chain_id            uuid NOT NULL REFERENCES {job} (id),
    type_name           text NOT NULL,
    chain_type_name     text NOT NULL,
    chain_index         integer NOT NULL CHECK (chain_index >= 0),
    status              {job_status} NOT NULL,
    input               jsonb,
    output              jsonb,
    created_at          timestamptz NOT NULL,
    scheduled_at        timestamptz NOT NULL,
    attempt             integer NOT NULL DEFAULT 0,
    last_attempt_at     timestamptz,
    last_attempt_error  text,
    leased_by           text,
    leased_until        timestamptz,
    lease_generation    bigint NOT NULL DEFAULT 0,
    completed_at        timestamptz,
    completed_by        text,
    deduplication_key   text,
    trace_context       jsonb,
    chain_trace_context jsonb,
    -- Blocker chains still incomplete; each chain completion decrements it under the row lock,
    -- so concurrent completions of several blockers never leave the job stranded.
    open_blocker_count  integer NOT NULL DEFAULT 0,
    CHECK ((chain_index = 0) = (id = chain_id))
);

CREATE TABLE {job_blocker} (
    job_id              uuid NOT NULL REFERENCES {job} (id),
    blocked_by_chain_id uuid NOT NULL REFERENCES {job} (id),
    "index"             integer NOT NULL,
    trace_context       jsonb,
    PRIMARY KEY (job_id, blocked_by_chain_id)
);

-- Acquisition (jobs_acquire, job_next_available): only pending jobs, per type, in the full claim
-- order (scheduled_at, created_at, id), so a claim reads its rows off the index and stops at the limit.
CREATE INDEX {job_acquisition_idx} ON {job} (type_name, scheduled_at, created_at, id)
    WHERE status = 'pending';

-- One job per chain position; also serves "last job of a chain" (backward scan).
CREATE UNIQUE INDEX {job_chain_index_idx} ON {job} (chain_id, chain_index);

-- Deduplication lookups: root jobs that carry a key, newest first.
CREATE INDEX {job_deduplication_idx} ON {job} (deduplication_key, created_at DESC)
    WHERE deduplication_key IS NOT NULL AND chain_index = 0;

-- Reaping (jobs_reap_expired): running jobs with a lease, per type, oldest lease first.
CREATE INDEX {job_expired_lease_idx} ON {job} (type_name, leased_until)
    WHERE status = 'running' AND leased_until IS NOT NULL;

-- Unblocking and blocked_jobs_list: which jobs a chain blocks.
CREATE INDEX {job_blocker_chain_idx} ON {job_blocker} (blocked_by_chain_id);

-- Listings (chains_list, jobs_list), keyset on (created_at, id).
CREATE INDEX {job_chain_listing_idx} ON {job} (created_at DESC, id DESC) WHERE chain_index = 0;
CREATE INDEX {job_listing_idx} ON {job} (created_at DESC, id DESC);
CREATE INDEX {job_listing_status_idx} ON {job} (status, created_at DESC, id DESC);
CREATE INDEX {job_listing_type_name_idx} ON {job} (type_name, created_at DESC, id DESC);
CREATE INDEX {job_chain_listing_type_name_idx} ON {job} (chain_type_name, created_at DESC, id DESC)
    WHERE chain_index = 0;
