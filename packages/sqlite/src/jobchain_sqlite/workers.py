"""The worker registry: heartbeats (with the rescue of dead workers' jobs) and the listing.

A heartbeat runs in the caller's write transaction, which holds SQLite's write lock from
start to end, so its statements see one consistent state:

1. ``workers_mark_dead`` (only with ``release_dead``): other rows past ``alive_until``
   become ``dead``, unless the heartbeat is fenced (the statement checks the caller's row);
2. ``worker_jobs_release`` (only when 1 marked any): their running jobs return to pending;
3. ``worker_heartbeat_lookup``: the caller's previous state and incarnation, and the next
   lease expiry;
4. ``worker_heartbeat``: the upsert of the caller's row;
5. ``workers_prune``: rows gone for longer than ``prune_after`` are deleted.

A fenced heartbeat (``WorkerHeartbeat.incarnation`` lower than the row's, or not higher than a
dead row's) stops after 3: it writes nothing and says ``was_dead``.
"""

from __future__ import annotations

from datetime import UTC, timedelta

from jobchain.contracts.state import WorkerHeartbeat, WorkerHeartbeatResult, WorkersList
from jobchain.entities import ATTEMPT_ERRORS_KEPT, Job, WorkerInfo, WorkerState, utcnow
from jobchain_sqlite.context import TxContext
from jobchain_sqlite.rows import fmt_time, job_from_row, json_list, parse_time, worker_from_row


async def worker_heartbeat(ctx: TxContext, params: WorkerHeartbeat) -> WorkerHeartbeatResult:
    """See StateTx.worker_heartbeat: at most five statements, three without dead workers, two
    when fenced."""
    ctx.require_write("worker_heartbeat")
    incarnation = params.incarnation  # 0 to 2**63 - 1: WorkerHeartbeat checked it
    now = params.now or utcnow()
    now_text = fmt_time(now)
    dead_ids: list[str] = []
    released: list[Job] = []
    if params.release_dead:
        rows = await ctx.fetch(
            ctx.q.workers_mark_dead,
            {"now": now_text, "worker_id": params.worker_id, "incarnation": incarnation},
        )
        dead_ids = sorted(row["id"] for row in rows)
    if dead_ids:
        rows = await ctx.fetch(
            ctx.q.worker_jobs_release,
            {
                "worker_ids": json_list(dead_ids),
                "now": now_text,
                "now_iso": now.astimezone(UTC).isoformat(),
                "errors_kept": ATTEMPT_ERRORS_KEPT,
            },
        )
        released = sorted((job_from_row(row) for row in rows), key=lambda job: (job.created_at, job.id))
    [lookup] = await ctx.fetch(
        ctx.q.worker_heartbeat_lookup,
        {"worker_id": params.worker_id, "type_names": json_list(params.type_names)},
    )
    next_lease_at = lookup["next_lease_at"]
    next_lease_expiry = None if next_lease_at is None else max(timedelta(0), parse_time(next_lease_at) - now)
    if _fenced(lookup["previous_state"], lookup["previous_incarnation"], incarnation):
        return WorkerHeartbeatResult(was_dead=True, next_lease_expiry=next_lease_expiry)
    await ctx.fetch(
        ctx.q.worker_heartbeat,
        {
            "worker_id": params.worker_id,
            "name": params.name,
            "host": params.host,
            "pid": params.pid,
            "version": params.version,
            "type_names": json_list(params.type_names),
            "concurrency": params.concurrency,
            "inflight": params.inflight,
            "buffered": params.buffered,
            "committing": params.committing,
            "capacity": params.capacity,
            "state": WorkerState(params.state).value,
            "now": now_text,
            "alive_until": fmt_time(now + params.alive_for),
            "incarnation": incarnation,
        },
    )
    await ctx.fetch(
        ctx.q.workers_prune,
        {"prune_before": fmt_time(now - params.prune_after), "dead_ids": json_list(dead_ids)},
    )
    return WorkerHeartbeatResult(
        released_jobs=released, dead_worker_ids=dead_ids, next_lease_expiry=next_lease_expiry
    )


def _fenced(previous_state: str | None, previous_incarnation: int | None, incarnation: int) -> bool:
    """The same rule as ``workers_mark_dead`` and the upsert's WHERE (see WorkerHeartbeat)."""
    if previous_state is None or previous_incarnation is None:
        return False  # the first heartbeat
    stored = int(previous_incarnation)
    return incarnation < stored or (previous_state == WorkerState.DEAD.value and incarnation <= stored)


async def workers_list(ctx: TxContext, params: WorkersList) -> list[WorkerInfo]:
    """See StateTx.workers_list: one statement; ``states`` filters the reported state."""
    rows = await ctx.fetch(
        ctx.q.workers_list,
        {"now": fmt_time(params.now or utcnow()), "states": json_list(dict.fromkeys(params.states))},
    )
    return [worker_from_row(row) for row in rows]


__all__ = ["worker_heartbeat", "workers_list"]
