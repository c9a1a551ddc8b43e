-- queue_stats: the figures of each job type at :now, one row per type, sorted by name.
-- Types: those named in :type_names (a JSON array), plus, when :every_type is 1, every type
-- that has a job, found by a loose index scan (one MIN per type on job_listing_type_name_idx),
-- and every paused type (a scan of type_control: one row per paused or rate-limited type).
-- paused: 1 when the type is paused (type_control's primary key).
-- Every figure is a correlated subquery on one partial index, forced with INDEXED BY (without
-- statistics the planner may prefer a listing index and read the table row of every job):
--   blocked              job_blocked_type_idx: the count of the type's range
--   pending, due,        job_acquisition_idx: the count; due jobs (scheduled_at <= :now) are
--   oldest_due_at        the start of the type's range, so MIN is its first entry
--   running, expired     job_expired_lease_idx: the count; leased_until < :now is a range
--   completed            job_completed_type_idx: the count of the type's range; this and the
--                        failed and cancelled counts are the only figures that read in
--                        proportion to the history kept (index entries, never rows)
--   failed_by_error_type job_failed_type_idx, grouped in index order (no sort, no row read):
--                        [[error_type or null, count], ...]
--   cancelled            job_cancelled_type_idx: the count
--   recent               per window start in :since (a JSON array): [[window index,
--                        completed, failed, cancelled], ...]; completed and cancelled from a
--                        range of their type index, failed from job_failed_idx (failed_at
--                        >= start) and the row's type (only recent failures are read)
--   durations            [microseconds, ...] of the :sample most recent completions at or
--                        after :duration_from that have an attempt_started_at, most recent
--                        first, equal times by id descending (job_completed_type_idx read
--                        backwards; the id tie-break sorts within one completion time only);
--                        exact integer arithmetic on the fixed-width time text
WITH RECURSIVE seen(type_name) AS (
    SELECT MIN(type_name) FROM {p}job WHERE :every_type
    UNION ALL
    SELECT (SELECT MIN(n.type_name) FROM {p}job n WHERE n.type_name > s.type_name)
    FROM seen s WHERE s.type_name IS NOT NULL
),
types(type_name) AS (
    SELECT type_name FROM seen WHERE type_name IS NOT NULL
    UNION
    SELECT value FROM json_each(:type_names)
    UNION
    SELECT tc.type_name FROM {p}type_control tc WHERE :every_type AND tc.paused_at IS NOT NULL
)
SELECT t.type_name,
    (SELECT COUNT(*) FROM {p}job b INDEXED BY {p}job_blocked_type_idx
     WHERE b.status = 'blocked' AND b.type_name = t.type_name) AS blocked,
    (SELECT COUNT(*) FROM {p}job pe INDEXED BY {p}job_acquisition_idx
     WHERE pe.status = 'pending' AND pe.type_name = t.type_name) AS pending,
    (SELECT COUNT(*) FROM {p}job pe INDEXED BY {p}job_acquisition_idx
     WHERE pe.status = 'pending' AND pe.type_name = t.type_name AND pe.scheduled_at <= :now) AS due,
    (SELECT MIN(pe.scheduled_at) FROM {p}job pe INDEXED BY {p}job_acquisition_idx
     WHERE pe.status = 'pending' AND pe.type_name = t.type_name AND pe.scheduled_at <= :now) AS oldest_due_at,
    (SELECT COUNT(*) FROM {p}job r INDEXED BY {p}job_expired_lease_idx
     WHERE r.status = 'running' AND r.leased_until IS NOT NULL AND r.type_name = t.type_name) AS running,
    (SELECT COUNT(*) FROM {p}job r INDEXED BY {p}job_expired_lease_idx
     WHERE r.status = 'running' AND r.leased_until IS NOT NULL AND r.type_name = t.type_name
       AND r.leased_until < :now) AS expired_leases,
    (SELECT COUNT(*) FROM {p}job c INDEXED BY {p}job_completed_type_idx
     WHERE c.status = 'completed' AND c.type_name = t.type_name) AS completed,
    (SELECT json_group_array(json_array(e.error_type, e.n)) FROM (
        SELECT json_extract(f.attempt_errors, '$[#-1].error_type') AS error_type, COUNT(*) AS n
        FROM {p}job f INDEXED BY {p}job_failed_type_idx
        WHERE f.status = 'failed' AND f.type_name = t.type_name
        GROUP BY json_extract(f.attempt_errors, '$[#-1].error_type')
    ) e) AS failed_by_error_type,
    (SELECT COUNT(*) FROM {p}job x INDEXED BY {p}job_cancelled_type_idx
     WHERE x.status = 'cancelled' AND x.type_name = t.type_name) AS cancelled,
    (SELECT json_group_array(json_array(
        w.key,
        (SELECT COUNT(*) FROM {p}job c INDEXED BY {p}job_completed_type_idx
         WHERE c.status = 'completed' AND c.type_name = t.type_name AND c.completed_at >= w.value),
        (SELECT COUNT(*) FROM {p}job f INDEXED BY {p}job_failed_idx
         WHERE f.status = 'failed' AND f.failed_at >= w.value AND f.type_name = t.type_name),
        (SELECT COUNT(*) FROM {p}job x INDEXED BY {p}job_cancelled_type_idx
         WHERE x.status = 'cancelled' AND x.type_name = t.type_name AND x.cancelled_at >= w.value)
    )) FROM json_each(:since) w) AS recent,
    (SELECT json_group_array(d.us) FROM (
        SELECT (strftime('%s', substr(c.completed_at, 1, 19)) - strftime('%s', substr(c.attempt_started_at, 1, 19)))
               * 1000000 + (substr(c.completed_at, 21, 6) - substr(c.attempt_started_at, 21, 6)) AS us
        FROM {p}job c INDEXED BY {p}job_completed_type_idx
        WHERE c.status = 'completed' AND c.type_name = t.type_name AND c.completed_at >= :duration_from
          AND c.attempt_started_at IS NOT NULL
        ORDER BY c.completed_at DESC, c.id DESC
        LIMIT :sample
    ) d) AS durations,
    EXISTS (SELECT 1 FROM {p}type_control tc WHERE tc.type_name = t.type_name AND tc.paused_at IS NOT NULL)
        AS paused
FROM types t
ORDER BY t.type_name
