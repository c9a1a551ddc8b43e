-- The jobchain schema as it stands after every migration in migrations/ (documentation, and the
-- reference the test suite compares a migrated database with). Objects live in {schema}; table,
-- type, index, function and trigger names carry the table prefix (default "jobchain_"). Build a
-- database with `await adapter.migrate()` (or `jobchain migrate`), never from this file.

CREATE SCHEMA IF NOT EXISTS {schema};

-- Which migrations have been applied.
CREATE TABLE {migration} (
    name       text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

CREATE TYPE {job_status} AS ENUM ('blocked', 'pending', 'running', 'completed', 'failed', 'cancelled');

-- One row per job. A chain is its root job (chain_index 0, chain_id = id) plus continuations
-- sharing chain_id with increasing chain_index (no foreign key on chain_id: jobs_create reads the
-- root FOR KEY SHARE before adding a continuation and reports a missing chain itself). fillfactor 75 leaves room for HOT updates: a job
-- is updated in place several times (pending → running → completed, lease renewals).
CREATE TABLE {job} (
    id                  uuid PRIMARY KEY,
    chain_id            uuid NOT NULL,
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
    lease_generation    bigint NOT NULL DEFAULT 0,   -- +1 per claim (fencing)
    completed_at        timestamptz,
    completed_by        text,                        -- NULL for a workerless completion
    deduplication_key   text,
    trace_context       jsonb,
    chain_trace_context jsonb,
    open_blocker_count  integer NOT NULL DEFAULT 0,  -- blocker chains not yet complete
    first_attempt_at    timestamptz,                 -- set by the first claim, then kept
    attempt_started_at  timestamptz,                 -- set by every claim (the current/last attempt)
    rescued_at          timestamptz,                 -- the last rescue: attempt abandoned, job pending again
    rescued_from        text,                        -- the worker whose attempt was abandoned
    rescue_reason       text,                        -- 'lease_expired' or 'worker_dead'
    attempt_errors      jsonb,                       -- error history: JSON array, oldest first, last 10
    attempt_base        integer NOT NULL DEFAULT 0,  -- attempt when last retried (budget = attempt - base)
    failed_at           timestamptz,                 -- set when failed, cleared by a retry
    cancelled_at        timestamptz,                 -- set when cancelled, cleared by a retry
    cancel_reason       text,                        -- the reason given to cancel_chain
    failed_by_chain_id  uuid,                        -- the blocker chain whose failure failed this job
    runs_after_failed_blockers boolean NOT NULL DEFAULT false, -- runs once blockers are terminal, whatever their status
    failed_error_type   text,                        -- a failed job's last error type ('' for none)
    priority            smallint NOT NULL DEFAULT 0, -- claim priority, -100..100 (higher first)
    ordering_key        text,                        -- roots only: chains of one key run one at a time
    CHECK ((chain_index = 0) = (id = chain_id))
) WITH (
    fillfactor = 75,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- The chains each job waits for, in declared order; kept after unblocking (job_blockers_get).
CREATE TABLE {job_blocker} (
    job_id              uuid NOT NULL REFERENCES {job} (id),
    blocked_by_chain_id uuid NOT NULL REFERENCES {job} (id),
    "index"             integer NOT NULL,
    trace_context       jsonb,
    resolves_on_any_end boolean NOT NULL DEFAULT false, -- a failed or cancelled chain resolves it too
    PRIMARY KEY (job_id, blocked_by_chain_id)
) WITH (autovacuum_vacuum_cost_delay = 0);

-- One row per (chain type, deduplication key) ever started: every deduplicating start locks it
-- (updates last_started_at) before deciding, so concurrent starts of one key wait for each other.
CREATE TABLE {deduplication_lock} (
    chain_type_name   text NOT NULL,
    deduplication_key text NOT NULL,
    last_started_at   timestamptz NOT NULL,
    PRIMARY KEY (chain_type_name, deduplication_key)
) WITH (fillfactor = 50, autovacuum_vacuum_cost_delay = 0);

-- The worker registry: one row per worker process, upserted by its heartbeat. A row whose
-- alive_until passed while it said running or draining is dead; a live worker's heartbeat marks
-- it so and releases its running jobs. state is text with a CHECK (easier to extend than an enum).
-- incarnation fences heartbeats: one of a lower incarnation, or of a dead row's, changes nothing.
CREATE TABLE {worker} (
    id           text PRIMARY KEY,
    name         text NOT NULL,
    host         text NOT NULL,
    pid          integer NOT NULL,
    version      text NOT NULL,
    type_names   text[] NOT NULL,
    concurrency  integer NOT NULL,
    inflight     integer NOT NULL,
    state        text NOT NULL CHECK (state IN ('running', 'draining', 'stopped', 'dead')),
    started_at   timestamptz NOT NULL,                -- the first heartbeat
    last_seen_at timestamptz NOT NULL,                -- the latest heartbeat
    alive_until  timestamptz NOT NULL,                -- latest heartbeat + its alive_for
    incarnation  bigint NOT NULL DEFAULT 0,           -- the worker's life this row records
    buffered     integer NOT NULL DEFAULT 0,          -- of inflight, waiting in its prefetch buffer
    committing   integer NOT NULL DEFAULT 0,          -- attempts whose commit is being written
    capacity     integer NOT NULL DEFAULT 0           -- the most it runs or buffers (0: not reported)
) WITH (fillfactor = 50, autovacuum_vacuum_cost_delay = 0);

-- Ordered keys: the chain that took each key last (a new root with the key upserts the row, which
-- serializes the creators of one key).
CREATE TABLE {ordering_key} (
    key               text PRIMARY KEY,
    last_chain_id     uuid NOT NULL,
    previous_chain_id uuid,
    updated_at        timestamptz NOT NULL
) WITH (fillfactor = 50, autovacuum_vacuum_cost_delay = 0);

-- Per job type: paused, and the fixed rate window's count. A claim of a limited type locks its row
-- first (serializing that type's claims).
CREATE TABLE {type_control} (
    type_name         text PRIMARY KEY,
    paused_at         timestamptz,
    rate_window_start timestamptz,
    rate_window_count integer NOT NULL DEFAULT 0
) WITH (fillfactor = 50, autovacuum_vacuum_cost_delay = 0);

-- The periodic schedules workers run (registered at worker start and after each tick).
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

-- Revoked dashboard sessions: each id's SHA-256 (never the id) until the session would expire.
CREATE TABLE {session_revocation} (
    session_key text PRIMARY KEY,
    expires_at  timestamptz NOT NULL
);

-- Failure and cancel hooks, one row per job type (end_hooks_register, at worker start): the hook
-- types its failures and cancellations start (of its jobs, and of its chains), and its default
-- priority, which hook jobs of that type get. The trigger function below reads it.
CREATE TABLE {type_hook} (
    type_name          text PRIMARY KEY,
    priority           smallint NOT NULL DEFAULT 0,
    on_failed          text,
    on_cancelled       text,
    on_chain_failed    text,
    on_chain_cancelled text,
    registered_at      timestamptz NOT NULL
);

-- jobs_acquire, job_next_available: pending jobs per type in claim order (no sort, stops at the limit).
CREATE INDEX {job_acquisition_idx} ON {job} (type_name, scheduled_at, created_at, id)
    WHERE status = 'pending';
-- jobs_acquire: pending jobs with a priority other than 0 in priority claim order (empty while
-- nobody uses priorities).
CREATE INDEX {job_priority_idx} ON {job} (type_name, priority DESC, scheduled_at, created_at, id)
    WHERE status = 'pending' AND priority <> 0;
-- One job per chain position; the last job of a chain is a backward scan of it.
CREATE UNIQUE INDEX {job_chain_index_idx} ON {job} (chain_id, chain_index);
-- jobs_create deduplication: keyed roots, newest first.
CREATE INDEX {job_deduplication_idx} ON {job} (deduplication_key, created_at DESC)
    WHERE deduplication_key IS NOT NULL AND chain_index = 0;
-- jobs_reap_expired, worker_heartbeat (next lease expiry; a dead worker's jobs): running jobs
-- with a lease, oldest lease first.
CREATE INDEX {job_expired_lease_idx} ON {job} (type_name, leased_until)
    WHERE status = 'running' AND leased_until IS NOT NULL;
-- job_complete (unblocking), blocked_jobs_list, chains_delete (references).
CREATE INDEX {job_blocker_chain_idx} ON {job_blocker} (blocked_by_chain_id);
-- chains_list (roots: chain_index = 0, and a root's type_name is its chain type) and jobs_list,
-- keyset on (created_at, id).
CREATE INDEX {job_listing_idx} ON {job} (created_at DESC, id DESC);
CREATE INDEX {job_listing_type_name_idx} ON {job} (type_name, created_at DESC, id DESC);
-- Listings and retention by one of the rare statuses (blocked, running, failed, cancelled);
-- pending and completed jobs are plentiful and found through the indexes above.
CREATE INDEX {job_listing_status_idx} ON {job} (status, created_at DESC, id DESC)
    WHERE status NOT IN ('pending', 'completed');
-- queue_stats, index-only: counts per type and status and failures by error type (B-tree
-- deduplication keeps it a few posting lists per type); finished jobs by completion time for the
-- windows, duration samples and throughput. A job gains an entry in each when it completes.
CREATE INDEX {job_stats_idx} ON {job} (type_name, status, failed_error_type)
    WHERE status NOT IN ('pending', 'running');
CREATE INDEX {job_finished_idx} ON {job} (type_name, status, completed_at, id)
    INCLUDE (attempt_started_at, failed_at, cancelled_at)
    WHERE status NOT IN ('pending', 'running', 'blocked');
-- worker_heartbeat: the dead scan (workers that still claim to be alive, by alive_until).
CREATE INDEX {worker_alive_idx} ON {worker} (alive_until)
    WHERE state IN ('running', 'draining');
-- sessions_revoke: the expired revocations it deletes.
CREATE INDEX {session_revocation_expires_idx} ON {session_revocation} (expires_at);

-- The failure and cancel hook rule (jobchain.contracts.end_hooks): whatever sets a job's
-- failed_at (status failed) or cancelled_at (status cancelled) from NULL, or inserts it so, starts
-- in that statement one pending root job per applicable hook in the type_hook table, with the JSON of
-- jobchain.JobEnded as input. Schema-qualified names and a fixed search_path; status compared as
-- text (see migration 0013). The WHEN clauses keep every other update free of trigger events.
CREATE FUNCTION {job_end_hooks}() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ended_failed boolean;
    ended_at     timestamptz;
BEGIN
    IF NEW.status::text = 'failed' AND NEW.failed_at IS NOT NULL THEN
        ended_failed := true;
        ended_at := NEW.failed_at;
    ELSIF NEW.status::text = 'cancelled' AND NEW.cancelled_at IS NOT NULL THEN
        ended_failed := false;
        ended_at := NEW.cancelled_at;
    ELSE
        RETURN NULL;
    END IF;
    INSERT INTO {job} (
        id, chain_id, type_name, chain_type_name, chain_index, status, input, created_at,
        scheduled_at, priority
    )
    SELECT h.id, h.id, h.hook, h.hook, 0, 'pending'::{job_status},
        jsonb_build_object(
            'event', CASE WHEN ended_failed THEN 'failed' ELSE 'cancelled' END,
            'scope', h.scope,
            'job_id', NEW.id,
            'type_name', NEW.type_name,
            'chain_id', NEW.chain_id,
            'chain_type_name', NEW.chain_type_name,
            'at', to_char(ended_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'),
            'error', CASE WHEN ended_failed THEN NEW.last_attempt_error END,
            'error_type', CASE WHEN ended_failed THEN NEW.attempt_errors -> -1 ->> 'error_type' END,
            'reason', CASE WHEN ended_failed THEN NULL ELSE NEW.cancel_reason END,
            'failed_by_chain_id', CASE WHEN ended_failed THEN NEW.failed_by_chain_id END
        ),
        ended_at, ended_at, COALESCE(p.priority, 0)
    FROM (
        SELECT gen_random_uuid() AS id, 'job' AS scope, 1 AS ord,
            CASE WHEN ended_failed THEN t.on_failed ELSE t.on_cancelled END AS hook
        FROM {type_hook} AS t
        WHERE t.type_name = NEW.type_name
        UNION ALL
        SELECT gen_random_uuid(), 'chain', 2,
            CASE WHEN ended_failed THEN t.on_chain_failed ELSE t.on_chain_cancelled END
        FROM {type_hook} AS t
        WHERE t.type_name = NEW.chain_type_name
    ) AS h
    LEFT JOIN {type_hook} AS p ON p.type_name = h.hook
    WHERE h.hook IS NOT NULL
    ORDER BY h.ord;
    RETURN NULL;
END
$$;

-- failed_at or cancelled_at set by an update (job_fail, chains_cancel, propagation, job_wait):
-- only a change from NULL with the matching status queues a trigger event, so claims, renewals,
-- reschedules, completions and retries (which clear both) never do.
CREATE TRIGGER {job_end_hooks_update}
    AFTER UPDATE OF failed_at, cancelled_at ON {job}
    FOR EACH ROW
    WHEN ((OLD.failed_at IS NULL AND NEW.failed_at IS NOT NULL AND NEW.status::text = 'failed')
        OR (OLD.cancelled_at IS NULL AND NEW.cancelled_at IS NOT NULL AND NEW.status::text = 'cancelled'))
    EXECUTE FUNCTION {job_end_hooks}();

-- A job inserted as failed (jobs_create against a blocker chain that already failed or was
-- cancelled).
CREATE TRIGGER {job_end_hooks_insert}
    AFTER INSERT ON {job}
    FOR EACH ROW
    WHEN (NEW.failed_at IS NOT NULL OR NEW.cancelled_at IS NOT NULL)
    EXECUTE FUNCTION {job_end_hooks}();
