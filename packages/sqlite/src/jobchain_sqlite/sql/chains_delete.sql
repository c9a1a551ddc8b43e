-- chains_delete: delete every job of the given chains; their blocker rows go by ON DELETE CASCADE.
-- Returns the rows as they were, so the adapter can rebuild each chain and its running jobs.
DELETE FROM {p}job
WHERE chain_id IN (SELECT value FROM json_each(:chain_ids))
RETURNING *
