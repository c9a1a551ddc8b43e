-- ordering_keys_forget: delete the ordering_key rows whose last chain is among :chain_ids
-- (a JSON array of chains just deleted). Plan: ordering_key_last_chain_idx.
DELETE FROM {p}ordering_key
WHERE last_chain_id IN (SELECT value FROM json_each(:chain_ids))
