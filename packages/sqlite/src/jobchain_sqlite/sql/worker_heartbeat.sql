-- worker_heartbeat: upsert the caller's registry row. started_at is set by the first
-- heartbeat only (the update leaves it); every reported field and the liveness times are
-- replaced, which also brings a row marked 'dead' back to what the worker reports.
INSERT INTO {p}worker (
    id, name, host, pid, version, type_names, concurrency, inflight, state,
    started_at, last_seen_at, alive_until
)
VALUES (
    :worker_id, :name, :host, :pid, :version, :type_names, :concurrency, :inflight, :state,
    :now, :now, :alive_until
)
ON CONFLICT (id) DO UPDATE SET
    name = excluded.name,
    host = excluded.host,
    pid = excluded.pid,
    version = excluded.version,
    type_names = excluded.type_names,
    concurrency = excluded.concurrency,
    inflight = excluded.inflight,
    state = excluded.state,
    last_seen_at = excluded.last_seen_at,
    alive_until = excluded.alive_until
