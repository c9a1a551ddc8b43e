-- jobs_deduplication_lock: lock the (chain type, key) rows of a batch's deduplicating starts,
-- creating the missing ones, before jobs_create decides. Sent in one pipeline with jobs_create
-- (one round trip, one transaction), so jobs_create's snapshot is taken after these locks: a
-- start of the same key by another open transaction holds its row (an insert, or the update
-- below), so this statement waits for it to end, and jobs_create then sees its chain if it
-- committed. Sorted, so that two batches sharing keys lock them in one order and never deadlock.
-- The row is updated, not only locked: a REPEATABLE READ transaction whose snapshot is older
-- than the other start then fails with a serialization error (retry) instead of deciding blind.
-- The update touches no indexed column, so it is HOT.
INSERT INTO {deduplication_lock} AS l (chain_type_name, deduplication_key, last_started_at)
SELECT DISTINCT k.chain_type_name, k.deduplication_key, COALESCE(%(now)s::timestamptz, statement_timestamp())
FROM unnest(%(chain_type_names)s::text[], %(keys)s::text[]) AS k(chain_type_name, deduplication_key)
ORDER BY k.chain_type_name, k.deduplication_key
ON CONFLICT (chain_type_name, deduplication_key)
DO UPDATE SET last_started_at = GREATEST(l.last_started_at, EXCLUDED.last_started_at)
