-- chains_delete_blockers: delete the blocker rows of the jobs of the given chains.
-- Only needed on a joined connection with foreign keys off (ON DELETE CASCADE does it otherwise).
DELETE FROM {p}job_blocker
WHERE job_id IN (SELECT j.id FROM {p}job j WHERE j.chain_id IN (SELECT value FROM json_each(:chain_ids)))
