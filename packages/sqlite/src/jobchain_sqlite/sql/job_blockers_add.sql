-- job_blockers_add: record the blocker chains of newly created (or waiting) jobs, in
-- declaration order. any_end (0/1, default 0): the chain counts as resolved whatever its
-- terminal status (an ordering key's previous chain, a JobWait with runs_after_failed).
INSERT INTO {p}job_blocker (job_id, blocked_by_chain_id, idx, resolves_on_any_end)
SELECT json_extract(value, '$.job_id'), json_extract(value, '$.chain_id'), json_extract(value, '$.idx'),
       COALESCE(json_extract(value, '$.any_end'), 0)
FROM json_each(:blockers)
