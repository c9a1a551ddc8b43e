-- jobs_retry_lookup: the requested jobs' status, failed_by_chain_id and the status of that
-- blocker chain (its last job) now; jobs_retry decides all-or-nothing from these rows.
SELECT j.id, j.status, j.failed_by_chain_id,
       (SELECT l.status FROM {p}job l
        WHERE l.chain_id = j.failed_by_chain_id
        ORDER BY l.chain_index DESC LIMIT 1) AS blocker_status
FROM {p}job j
WHERE j.id IN (SELECT value FROM json_each(:job_ids))
