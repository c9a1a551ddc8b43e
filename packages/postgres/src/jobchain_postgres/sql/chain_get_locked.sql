-- chain_get_locked: chain_get holding the row lock of the chain's last job until the tx ends.
-- Plan: as chain_get; FOR UPDATE on the last job only.
SELECT r.*, l.*
FROM {job} AS r
CROSS JOIN LATERAL (
    SELECT c.* FROM {job} AS c WHERE c.chain_id = r.id ORDER BY c.chain_index DESC LIMIT 1 FOR UPDATE
) AS l
WHERE r.id = %(chain_id)s AND r.chain_index = 0
