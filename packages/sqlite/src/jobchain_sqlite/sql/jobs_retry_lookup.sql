-- jobs_retry_lookup: the requested jobs' status, and the blocker chain that keeps one from
-- being retried (a job without runs_after_failed_blockers whose blocker chain is failed or
-- cancelled: its failed_by_chain_id if that chain still is, else the first such blocker
-- declared; a blocker row with resolves_on_any_end never keeps a job from it); jobs_retry decides all-or-nothing from these rows.
-- Plan: primary key, job_blocker primary key, job_chain_index_idx per blocker chain.
SELECT j.id, j.status,
       CASE WHEN j.runs_after_failed_blockers THEN NULL
            WHEN (SELECT l.status FROM {p}job l
                  WHERE l.chain_id = j.failed_by_chain_id
                  ORDER BY l.chain_index DESC LIMIT 1) IN ('failed', 'cancelled') THEN j.failed_by_chain_id
            ELSE (SELECT o.blocked_by_chain_id FROM {p}job_blocker o
                  WHERE o.job_id = j.id AND NOT o.resolves_on_any_end
                    AND (SELECT l.status FROM {p}job l
                         WHERE l.chain_id = o.blocked_by_chain_id
                         ORDER BY l.chain_index DESC LIMIT 1) IN ('failed', 'cancelled')
                  ORDER BY o.idx LIMIT 1) END AS bad_blocker
FROM {p}job j
WHERE j.id IN (SELECT value FROM json_each(:job_ids))
