-- jobs_ordering_lock: lock the ordering_key rows of a batch's new roots with an ordering key,
-- creating the missing ones, before jobs_create decides. Sent in one pipeline with jobs_create
-- (after jobs_deduplication_lock when the batch has both), so jobs_create's snapshot is taken
-- after these locks: a creation of the same key in another open transaction holds its row (an
-- insert, or its update by jobs_create), so this statement waits for it to end, and jobs_create
-- then sees its chain as the key's last one. Other keys never wait. Sorted, so that batches
-- sharing keys lock them in one order and never deadlock. A missing row is created naming the
-- batch's first root of the key (:chain_ids, not inserted yet: no previous chain); jobs_create
-- sets it to the key's last new root, or deletes it if every root of the key deduplicated.
-- The row is updated, not only locked: a REPEATABLE READ transaction whose snapshot is older
-- than the other creation then fails with a serialization error (retry) instead of deciding
-- blind. The update touches no indexed column, so it is HOT.
INSERT INTO {ordering_key} AS o (key, last_chain_id, updated_at)
SELECT k.key, k.chain_id, COALESCE(%(now)s::timestamptz, statement_timestamp())
FROM unnest(%(keys)s::text[], %(chain_ids)s::uuid[]) AS k(key, chain_id)
ORDER BY k.key
ON CONFLICT (key) DO UPDATE SET updated_at = o.updated_at
