-- schedules_list: every registered periodic schedule, by name.
-- Plan: a scan of the schedule table, one row per schedule in the workers' code.
SELECT s.name, s.cron, s.timezone, s.type_name, s.catch_up, s.worker_name, s.registered_at,
    s.last_seen_at, s.last_tick_at, s.last_chain_id, s.next_tick_at
FROM {schedule} AS s
ORDER BY s.name COLLATE "C"
