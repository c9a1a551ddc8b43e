-- end_hooks_register: upsert the hook rows of job types by name, in one statement. :items is
-- a JSON array of [type_name, priority, on_failed, on_cancelled, on_chain_failed,
-- on_chain_cancelled] (a hook is a type name or null: none); registered_at is :now for a new
-- row and kept for an existing one, whose every other column is replaced (a hook removed from
-- the code is forgotten). A name given twice ends as its last (rows are upserted in array
-- order). Plan: the primary key of {p}type_hook per item.
INSERT INTO {p}type_hook (
    type_name, priority, on_failed, on_cancelled, on_chain_failed, on_chain_cancelled, registered_at
)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), json_extract(value, '$[4]'), json_extract(value, '$[5]'), :now
FROM json_each(:items)
WHERE true
ORDER BY key
ON CONFLICT (type_name) DO UPDATE SET
    priority = excluded.priority,
    on_failed = excluded.on_failed,
    on_cancelled = excluded.on_cancelled,
    on_chain_failed = excluded.on_chain_failed,
    on_chain_cancelled = excluded.on_chain_cancelled
