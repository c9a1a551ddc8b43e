-- type_control_lock: lock the type_control rows of the limited types a claim serves (created if
-- missing), in name order, until the transaction ends. Sent in one pipeline before
-- jobs_acquire_limited / jobs_acquire_atomic_limited: claims of one limited type take turns, and
-- each claim statement's snapshot (READ COMMITTED: taken when it starts, after this lock was
-- granted) sees every claim of the type committed before it, so max_running and the rate window
-- hold across claimers. An existing row is locked without a new row version (ON CONFLICT DO
-- UPDATE ... WHERE false locks the conflicting row and updates nothing). Claims of other types
-- never touch these rows.
INSERT INTO {type_control} AS c (type_name)
SELECT t.type_name
FROM unnest(%(type_names)s::text[]) AS t(type_name)
ORDER BY t.type_name COLLATE "C"
ON CONFLICT (type_name) DO UPDATE SET rate_window_count = c.rate_window_count WHERE false
