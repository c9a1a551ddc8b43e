-- schedules_register: upsert schedules by name. :items is a JSON array of [name, cron,
-- timezone, type_name, catch_up (0/1), worker_name, next_tick_at, last_tick_at,
-- last_chain_id]; last_seen_at is :now, registered_at too for a new row. The stored tick (and
-- its chain) only moves forward: a registration with no tick or an older one keeps them. A
-- name given twice ends as its last registration (rows are upserted in array order).
INSERT INTO {p}schedule (
    name, cron, timezone, type_name, catch_up, worker_name, registered_at, last_seen_at,
    next_tick_at, last_tick_at, last_chain_id
)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), json_extract(value, '$[4]'), json_extract(value, '$[5]'),
       :now, :now, json_extract(value, '$[6]'), json_extract(value, '$[7]'), json_extract(value, '$[8]')
FROM json_each(:items)
WHERE true
ORDER BY key
ON CONFLICT (name) DO UPDATE SET
    cron = excluded.cron,
    timezone = excluded.timezone,
    type_name = excluded.type_name,
    catch_up = excluded.catch_up,
    worker_name = excluded.worker_name,
    last_seen_at = excluded.last_seen_at,
    next_tick_at = excluded.next_tick_at,
    last_chain_id = CASE
        WHEN {p}schedule.last_tick_at IS NOT NULL
             AND (excluded.last_tick_at IS NULL OR excluded.last_tick_at < {p}schedule.last_tick_at)
        THEN {p}schedule.last_chain_id ELSE excluded.last_chain_id END,
    last_tick_at = CASE
        WHEN {p}schedule.last_tick_at IS NOT NULL
             AND (excluded.last_tick_at IS NULL OR excluded.last_tick_at < {p}schedule.last_tick_at)
        THEN {p}schedule.last_tick_at ELSE excluded.last_tick_at END
