-- schedules_list: the registered schedules of :names (a JSON array), or every one when
-- :every is 1, by name.
SELECT name, cron, timezone, type_name, catch_up, worker_name, registered_at, last_seen_at,
       last_tick_at, last_chain_id, next_tick_at
FROM {p}schedule
WHERE :every OR name IN (SELECT value FROM json_each(:names))
ORDER BY name
