-- 0004_deduplication_lock: one row per (chain type, deduplication key) ever started, which every
-- deduplicating start locks before it decides (sql/jobs_deduplication_lock.sql). It makes a start
-- wait for an uncommitted start of the same key in another transaction, then see it: the start's
-- decision statement takes its snapshot after this lock. Row locks, not advisory locks: a bulk
-- start holds thousands of keys in one transaction, and advisory locks would fill the shared lock
-- table (max_locks_per_transaction); a row lock costs no shared memory. Existing chains need no
-- row here: a key's first locked start after the upgrade creates it, and every earlier start of
-- that key is committed and visible to it.
CREATE TABLE {deduplication_lock} (
    chain_type_name   text NOT NULL,
    deduplication_key text NOT NULL,
    last_started_at   timestamptz NOT NULL,
    PRIMARY KEY (chain_type_name, deduplication_key)
) WITH (fillfactor = 50, autovacuum_vacuum_cost_delay = 0);
