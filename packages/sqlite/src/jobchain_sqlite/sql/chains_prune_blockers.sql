-- chains_prune, step 2: delete the resolves_on_any_end blocker rows on the chains about to go
-- (:chain_ids, a JSON array from step 1). Jobs of other chains hold no other rows on them
-- (step 1 left such chains out); rows of the chains' own jobs go with those jobs.
-- Plan: job_blocker_chain_idx.
DELETE FROM {p}job_blocker
WHERE blocked_by_chain_id IN (SELECT value FROM json_each(:chain_ids))
  AND resolves_on_any_end
