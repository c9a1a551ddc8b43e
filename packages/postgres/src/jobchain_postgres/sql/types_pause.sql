-- types_pause: pause (:paused) or resume job types, idempotently; returns the paused types among
-- :type_names afterwards (every one of them when pausing, none when resuming). Pausing keeps the
-- paused_at of a type that already was. A type needs no jobs: its type_control row is created.
-- Rows are written in name order, as type_control_lock locks them (no deadlock with a claim), and
-- a pause waits for a claim of a limited type that holds its row (until that claim commits).
-- Plan: type_control primary key, one probe per type.
WITH paused AS (
    INSERT INTO {type_control} AS c (type_name, paused_at)
    SELECT t.type_name, COALESCE(%(now)s::timestamptz, statement_timestamp())
    FROM unnest(%(type_names)s::text[]) AS t(type_name)
    WHERE %(paused)s
    ORDER BY t.type_name COLLATE "C"
    ON CONFLICT (type_name) DO UPDATE SET paused_at = COALESCE(c.paused_at, excluded.paused_at)
    RETURNING c.type_name, c.paused_at
),
resumed AS (
    UPDATE {type_control} AS c
    SET paused_at = NULL
    WHERE NOT %(paused)s
      AND c.type_name = ANY (%(type_names)s::text[])
      AND c.paused_at IS NOT NULL
    RETURNING c.type_name
)
SELECT paused.type_name, paused.paused_at FROM paused
