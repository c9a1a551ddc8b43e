-- chains_prune, step 3: delete every job of the chains of step 1 (:chain_ids, a JSON array);
-- their own blocker rows go by ON DELETE CASCADE. Returns what the result is built from.
DELETE FROM {p}job
WHERE chain_id IN (SELECT value FROM json_each(:chain_ids))
RETURNING id, chain_id, chain_index, chain_type_name, status, completed_at, failed_at, cancelled_at, ordering_key
