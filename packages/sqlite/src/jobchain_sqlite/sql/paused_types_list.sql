-- paused_types_list: every paused type, by name (type_control holds one row per paused or
-- rate-limited type: a small table).
SELECT type_name, paused_at FROM {p}type_control WHERE paused_at IS NOT NULL ORDER BY type_name
