-- job_hold: job_get's lock (lock=True): a transaction-level advisory lock on the job's id, held
-- until the transaction ends; sent in one pipeline just before job_get, whose snapshot is then
-- taken after the lock was granted (a second holder waits, then reads what the first committed).
-- An atomic attempt holds its job this way for the whole attempt. It is no row lock, so a cancel,
-- fail or other plain update of the row never waits for the attempt (its late writes are fenced
-- instead); reapers and the dead-worker release skip a held job (pg_try_advisory_xact_lock_shared
-- fails on it), so a long atomic attempt is not taken from its worker when its lease runs out.
-- The key is the job id hashed with seed 1717 (the same expression in every statement).
SELECT pg_advisory_xact_lock(hashtextextended(%(job_id)s::text, 1717))
