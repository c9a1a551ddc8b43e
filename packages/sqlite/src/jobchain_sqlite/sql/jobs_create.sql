-- jobs_create: insert a batch of jobs from a JSON array in one statement.
-- Plan: multi-row INSERT … SELECT FROM json_each; RETURNING order is unspecified (match by id).
INSERT INTO {p}job (
    id, type_name, chain_id, chain_type_name, chain_index, status, input,
    created_at, scheduled_at, deduplication_key, trace_context, chain_trace_context
)
SELECT
    json_extract(value, '$.id'),
    json_extract(value, '$.type_name'),
    json_extract(value, '$.chain_id'),
    json_extract(value, '$.chain_type_name'),
    json_extract(value, '$.chain_index'),
    json_extract(value, '$.status'),
    json_extract(value, '$.input'),
    :now,
    json_extract(value, '$.scheduled_at'),
    json_extract(value, '$.deduplication_key'),
    json_extract(value, '$.trace_context'),
    json_extract(value, '$.chain_trace_context')
FROM json_each(:jobs)
ORDER BY key
RETURNING *
