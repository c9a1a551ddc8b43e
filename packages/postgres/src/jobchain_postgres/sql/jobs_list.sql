-- jobs_list: jobs by created_at then id, filtered and keyset-paginated (limit + 1 rows).
-- Plan: job_listing_idx, or job_listing_type_name_idx with a type filter; the leaseholder filter
-- (status = 'running') can read job_listing_status_idx (partial: the rare statuses). The status
-- list compares text, so it filters the rows those yield, as does the error type. A list of one
-- rare status (dead letters: failed) also comes as :rare_status, an equality on the enum that
-- reads job_listing_status_idx in (created_at, id) order: the failed jobs, not every job.
SELECT j.*
FROM {job} AS j
WHERE (%(type_names)s::text[] IS NULL OR j.type_name = ANY (%(type_names)s::text[]))
  AND (%(chain_type_names)s::text[] IS NULL OR j.chain_type_name = ANY (%(chain_type_names)s::text[]))
  AND (%(chain_ids)s::uuid[] IS NULL OR j.chain_id = ANY (%(chain_ids)s::uuid[]))
  AND (%(job_ids)s::uuid[] IS NULL OR j.id = ANY (%(job_ids)s::uuid[]))
  AND (%(statuses)s::text[] IS NULL OR j.status::text = ANY (%(statuses)s::text[]))
  AND (%(rare_status)s::text IS NULL
       OR (j.status = %(rare_status)s::text::{job_status} AND j.status NOT IN ('pending', 'completed')))
  -- The type of the last entry of the error history (dead letters by error).
  AND (%(error_types)s::text[] IS NULL
       OR j.attempt_errors -> -1 ->> 'error_type' = ANY (%(error_types)s::text[]))
  -- What those workers hold: their running jobs (an expired lease still holds until reaped).
  AND (%(leased_by)s::text[] IS NULL
       OR (j.status = 'running' AND j.leased_by = ANY (%(leased_by)s::text[])))
  AND (%(created_from)s::timestamptz IS NULL OR j.created_at >= %(created_from)s::timestamptz)
  AND (%(created_to)s::timestamptz IS NULL OR j.created_at <= %(created_to)s::timestamptz)
  AND (%(after_at)s::timestamptz IS NULL
       OR (j.created_at, j.id) {after} (%(after_at)s::timestamptz, %(after_id)s::uuid))
ORDER BY j.created_at {order}, j.id {order}
LIMIT %(limit)s
