-- job_blockers_add: record the blocker chains of newly created jobs, in declaration order.
INSERT INTO {p}job_blocker (job_id, blocked_by_chain_id, idx)
SELECT json_extract(value, '$.job_id'), json_extract(value, '$.chain_id'), json_extract(value, '$.idx')
FROM json_each(:blockers)
