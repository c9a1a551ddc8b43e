-- schedules_register: upsert the periodic schedules a worker runs (:schedules, a JSON array, one
-- item per name), then delete the rows last seen before :forget_before (schedules gone from every
-- worker's code), in one statement. Each row gets every field given and last_seen_at = now;
-- registered_at is set when the row is created; next_tick_at is kept when none is given.
-- last_tick_at only moves forward: an older tick (or none) keeps the stored tick and its chain.
-- The rows being registered are never deleted by the same call. Returns the registered rows as
-- they now are, in input order.
-- Plan: schedule primary key, one probe per item; the delete scans the table (one row per
-- schedule).
WITH items AS MATERIALIZED (
    SELECT x.*
    FROM jsonb_to_recordset(%(schedules)s::jsonb) AS x(
        ord integer, name text, cron text, timezone text, type_name text, catch_up boolean,
        worker_name text, next_tick_at timestamptz, last_tick_at timestamptz, last_chain_id uuid
    )
),
registered AS (
    INSERT INTO {schedule} AS s (
        name, cron, timezone, type_name, catch_up, worker_name, registered_at, last_seen_at,
        last_tick_at, last_chain_id, next_tick_at
    )
    SELECT i.name, i.cron, i.timezone, i.type_name, i.catch_up, i.worker_name,
        COALESCE(%(now)s::timestamptz, statement_timestamp()),
        COALESCE(%(now)s::timestamptz, statement_timestamp()),
        i.last_tick_at, CASE WHEN i.last_tick_at IS NULL THEN NULL ELSE i.last_chain_id END, i.next_tick_at
    FROM items AS i
    ORDER BY i.name COLLATE "C"
    ON CONFLICT (name) DO UPDATE SET
        cron = excluded.cron,
        timezone = excluded.timezone,
        type_name = excluded.type_name,
        catch_up = excluded.catch_up,
        worker_name = excluded.worker_name,
        last_seen_at = excluded.last_seen_at,
        next_tick_at = COALESCE(excluded.next_tick_at, s.next_tick_at),
        last_tick_at = CASE
            WHEN excluded.last_tick_at > s.last_tick_at OR s.last_tick_at IS NULL
            THEN COALESCE(excluded.last_tick_at, s.last_tick_at) ELSE s.last_tick_at
        END,
        last_chain_id = CASE
            WHEN excluded.last_tick_at > s.last_tick_at OR (s.last_tick_at IS NULL AND excluded.last_tick_at IS NOT NULL)
            THEN excluded.last_chain_id ELSE s.last_chain_id
        END
    RETURNING s.name, s.cron, s.timezone, s.type_name, s.catch_up, s.worker_name, s.registered_at,
        s.last_seen_at, s.last_tick_at, s.last_chain_id, s.next_tick_at
),
forgotten AS (
    DELETE FROM {schedule} AS s
    WHERE s.last_seen_at < %(forget_before)s::timestamptz
      AND s.name NOT IN (SELECT items.name FROM items)
    RETURNING s.name
)
SELECT r.name, r.cron, r.timezone, r.type_name, r.catch_up, r.worker_name, r.registered_at,
    r.last_seen_at, r.last_tick_at, r.last_chain_id, r.next_tick_at
FROM registered AS r
JOIN items AS i ON i.name = r.name
ORDER BY i.ord
