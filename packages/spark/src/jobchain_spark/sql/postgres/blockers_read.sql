-- blockers_read: one row per blocker declaration, with the blocked job's chain and creation time.
SELECT
    b.job_id::text AS job_id, j.chain_id::text AS chain_id,
    b.blocked_by_chain_id::text AS blocked_by_chain_id, b."index" AS position,
    b.trace_context::text AS trace_context, j.created_at
FROM {job_blocker} b
JOIN {job} j ON j.id = b.job_id
WHERE {where}
