-- paused_types_list: every paused type, by name.
-- Plan: a scan of type_control, one row per paused or rate-limited type.
SELECT c.type_name, c.paused_at
FROM {type_control} AS c
WHERE c.paused_at IS NOT NULL
ORDER BY c.type_name COLLATE "C"
