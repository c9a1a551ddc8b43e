-- ordering_keys_prune: delete up to :limit ordering_key rows whose last chain is gone (deleted
-- on a connection that left its row, e.g. by an older library), by key. Returns their keys.
DELETE FROM {p}ordering_key
WHERE key IN (
    SELECT o.key FROM {p}ordering_key o
    WHERE NOT EXISTS (SELECT 1 FROM {p}job j WHERE j.id = o.last_chain_id)
    ORDER BY o.key
    LIMIT :limit
)
RETURNING key
