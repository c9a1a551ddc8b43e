-- chains_cancel_lock: wait for and take the row locks of the last jobs of the chains chains_cancel
-- is about to decide (sent in one pipeline just before it), in the order of :chain_ids (the
-- adapter sorts them, so concurrent cancels never deadlock). As job_fail_lock: a transaction
-- inserting a job blocked by one of these chains is waited for, so the propagation sees its job;
-- an atomic attempt's hold is no row lock and is never waited for.
SELECT l.id
FROM unnest(%(chain_ids)s::uuid[]) WITH ORDINALITY AS c(chain_id, n)
CROSS JOIN LATERAL (
    SELECT j.id FROM {job} AS j WHERE j.chain_id = c.chain_id ORDER BY j.chain_index DESC LIMIT 1 FOR UPDATE
) AS l
ORDER BY c.n
