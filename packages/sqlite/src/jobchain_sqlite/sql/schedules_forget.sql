-- schedules_forget: delete the schedules last seen before :forget_before (removed from every
-- worker's code), except those of :names (a JSON array: registered by this call).
DELETE FROM {p}schedule
WHERE last_seen_at < :forget_before AND name NOT IN (SELECT value FROM json_each(:names))
