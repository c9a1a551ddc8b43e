-- chains_cancel_lookup: per requested chain id, its last job (id, status, lease holder), or
-- NULLs when no chain has that id (a continuation's id is not a chain's). chains_cancel
-- decides all-or-nothing from these rows, and which cancelled jobs were running and whose.
-- Plan: json_each drives job_chain_index_idx.
SELECT r.value AS chain_id, l.id AS job_id, l.status AS status, l.leased_by AS leased_by
FROM json_each(:chain_ids) r
LEFT JOIN {p}job l ON l.chain_id = r.value
    AND l.chain_index = (SELECT MAX(m.chain_index) FROM {p}job m WHERE m.chain_id = r.value)
ORDER BY r.key
