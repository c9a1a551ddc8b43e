-- chains_list: chains (root and last job) by root created_at then id, filtered and keyset-paginated;
-- the caller asks for limit + 1 rows to learn whether a next page exists.
-- Plan: job_listing_idx keeping roots (chain_index = 0), or job_listing_type_name_idx with a type
-- filter: a root's type_name is its chain's type (every chain the client starts; a root given
-- another type_name through the state adapter is found by a type filter only if that names both).
-- No index holds roots only: it would cost one more entry per start. The status filter applies to each chain's last job (LATERAL) and cannot use
-- an index.
SELECT r.*, l.*
FROM {job} AS r
CROSS JOIN LATERAL (
    SELECT c.* FROM {job} AS c WHERE c.chain_id = r.id ORDER BY c.chain_index DESC LIMIT 1
) AS l
WHERE r.chain_index = 0
  AND (%(type_names)s::text[] IS NULL
       OR (r.type_name = ANY (%(type_names)s::text[]) AND r.chain_type_name = ANY (%(type_names)s::text[])))
  AND (%(chain_ids)s::uuid[] IS NULL OR r.id = ANY (%(chain_ids)s::uuid[]))
  AND (%(job_ids)s::uuid[] IS NULL
       OR r.id IN (SELECT x.chain_id FROM {job} AS x WHERE x.id = ANY (%(job_ids)s::uuid[])))
  AND (%(statuses)s::text[] IS NULL OR l.status::text = ANY (%(statuses)s::text[]))
  AND (NOT %(root_only)s::boolean
       OR NOT EXISTS (SELECT 1 FROM {job_blocker} AS b WHERE b.blocked_by_chain_id = r.id))
  AND (%(created_from)s::timestamptz IS NULL OR r.created_at >= %(created_from)s::timestamptz)
  AND (%(created_to)s::timestamptz IS NULL OR r.created_at <= %(created_to)s::timestamptz)
  AND (%(after_at)s::timestamptz IS NULL
       OR (r.created_at, r.id) {after} (%(after_at)s::timestamptz, %(after_id)s::uuid))
ORDER BY r.created_at {order}, r.id {order}
LIMIT %(limit)s
