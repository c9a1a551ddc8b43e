-- chains_delete_lock: wait for and take the row locks of the roots chains_delete is about to
-- delete (sent in one pipeline just before it), with :cascade every chain that blocks a job of the
-- set, recursively, in root id order so concurrent deletions never deadlock. jobs_create locks a
-- continued chain's root FOR KEY SHARE: a completion continuing one of these chains is waited for
-- here, so chains_delete's snapshot (taken after these locks) sees its new job and deletes it too;
-- one that comes later waits for this transaction and then finds its chain gone.
-- Plan: primary key lookups for the roots; job_chain_index_idx and the job_blocker primary key for
-- the closure.
WITH RECURSIVE closure (chain_id) AS (
    SELECT r.id
    FROM {job} AS r
    WHERE r.id = ANY (%(chain_ids)s::uuid[]) AND r.chain_index = 0
    UNION
    SELECT b.blocked_by_chain_id
    FROM closure AS c
    JOIN {job} AS j ON j.chain_id = c.chain_id
    JOIN {job_blocker} AS b ON b.job_id = j.id
    WHERE %(cascade)s::boolean
)
SELECT r.id
FROM {job} AS r
WHERE r.id IN (SELECT closure.chain_id FROM closure) AND r.chain_index = 0
ORDER BY r.id
FOR UPDATE OF r
