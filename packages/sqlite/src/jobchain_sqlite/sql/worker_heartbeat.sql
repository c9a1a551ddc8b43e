-- worker_heartbeat: upsert the caller's registry row. started_at is set by the first
-- heartbeat only (the update leaves it); every reported field, the incarnation and the
-- liveness times are replaced. Not run for a fenced heartbeat (workers.py decides from
-- worker_heartbeat_lookup); the WHERE repeats the fence so this statement alone never brings a
-- dead row back or lets an earlier incarnation overwrite a later one.
INSERT INTO {p}worker (
    id, name, host, pid, version, type_names, concurrency, inflight, buffered, committing,
    capacity, state, started_at, last_seen_at, alive_until, incarnation
)
VALUES (
    :worker_id, :name, :host, :pid, :version, :type_names, :concurrency, :inflight, :buffered,
    :committing, :capacity, :state, :now, :now, :alive_until, :incarnation
)
ON CONFLICT (id) DO UPDATE SET
    name = excluded.name,
    host = excluded.host,
    pid = excluded.pid,
    version = excluded.version,
    type_names = excluded.type_names,
    concurrency = excluded.concurrency,
    inflight = excluded.inflight,
    buffered = excluded.buffered,
    committing = excluded.committing,
    capacity = excluded.capacity,
    state = excluded.state,
    last_seen_at = excluded.last_seen_at,
    alive_until = excluded.alive_until,
    incarnation = excluded.incarnation
WHERE excluded.incarnation > {p}worker.incarnation
   OR (excluded.incarnation = {p}worker.incarnation AND {p}worker.state <> 'dead')
