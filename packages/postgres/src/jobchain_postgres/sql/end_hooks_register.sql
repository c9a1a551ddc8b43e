-- end_hooks_register: upsert one type_hook row per job type (:types, a JSON array, one item per
-- type name): its four hooks (NULL: none) and its default priority, which hook jobs of that type
-- get. A row given without hooks keeps its row with every hook NULL (how a removed hook is
-- forgotten); types not given are untouched. registered_at is set when the row is created.
-- Returns the type names registered.
-- Plan: type_hook primary key, one probe per item; rows are upserted in name order (one lock
-- order for concurrent registrations).
INSERT INTO {type_hook} AS h (
    type_name, priority, on_failed, on_cancelled, on_chain_failed, on_chain_cancelled, registered_at
)
SELECT i.type_name, i.priority, i.on_failed, i.on_cancelled, i.on_chain_failed, i.on_chain_cancelled,
    COALESCE(%(now)s::timestamptz, statement_timestamp())
FROM jsonb_to_recordset(%(types)s::jsonb) AS i(
    type_name text, priority smallint, on_failed text, on_cancelled text, on_chain_failed text,
    on_chain_cancelled text
)
ORDER BY i.type_name COLLATE "C"
ON CONFLICT (type_name) DO UPDATE SET
    priority = excluded.priority,
    on_failed = excluded.on_failed,
    on_cancelled = excluded.on_cancelled,
    on_chain_failed = excluded.on_chain_failed,
    on_chain_cancelled = excluded.on_chain_cancelled
RETURNING h.type_name
