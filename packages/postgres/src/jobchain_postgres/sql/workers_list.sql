-- workers_list: the worker registry, most recently started first (then id). A row whose
-- alive_until passed while it said running or draining is reported dead, whether or not a
-- heartbeat has marked it yet; :states (NULL: every state) filters the reported state.
-- Plan: a scan of the registry, which holds one row per worker process (pruned by heartbeats).
SELECT r.id, r.name, r.host, r.pid, r.version, r.type_names, r.concurrency, r.inflight, r.state,
    r.started_at, r.last_seen_at, r.alive_until, r.buffered, r.committing, r.capacity
FROM (
    SELECT w.id, w.name, w.host, w.pid, w.version, w.type_names, w.concurrency, w.inflight,
        CASE
            WHEN w.state IN ('running', 'draining')
                AND w.alive_until < COALESCE(%(now)s::timestamptz, statement_timestamp())
            THEN 'dead'
            ELSE w.state
        END AS state,
        w.started_at, w.last_seen_at, w.alive_until, w.buffered, w.committing, w.capacity
    FROM {worker} AS w
) AS r
WHERE %(states)s::text[] IS NULL OR r.state = ANY (%(states)s::text[])
ORDER BY r.started_at DESC, r.id
