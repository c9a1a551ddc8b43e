-- origins_set: name the chains jobs_propagate (next in the same pipeline) starts from, as job_fail
-- and chains_cancel do: jobs_create's chains created failed (a blocker chain had failed) that
-- jobs of the same batch declared as blockers.
SELECT set_config('jobchain.origins', %(origins)s::text, true)
