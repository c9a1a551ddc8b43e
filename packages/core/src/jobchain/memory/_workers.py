"""Rescue and the worker registry of the in-process state backend.

Reaping returns jobs whose lease expired to pending; a heartbeat registers its worker and
(with ``release_dead``) returns the jobs of workers that stopped heartbeating. Both record
the rescue on each job they return, and both skip rows another transaction holds
(``SKIP LOCKED``): that transaction decides their fate, and the lease expiry is the backstop.
Like the other writes (``_writes``), each function is one synchronous attempt.
"""

from __future__ import annotations

import heapq
from dataclasses import replace
from datetime import datetime, timedelta

from jobchain.contracts.state import JobsReapExpired, WorkerHeartbeat, WorkerHeartbeatResult, WorkersList
from jobchain.entities import Job, JobStatus, RescueReason, WorkerInfo, WorkerState
from jobchain.memory._history import abandoned
from jobchain.memory._registry import WorkerTable
from jobchain.memory._store import Blocked, TxState, created_key, unique
from jobchain.memory._writes import Ctx

ALIVE_STATES = (WorkerState.RUNNING, WorkerState.DRAINING)
"""Stored states of a worker that still promises to heartbeat (``stopped`` promised to stop)."""


def rescue_error(reason: RescueReason, worker_id: str | None) -> str:
    """The ``last_attempt_error`` of a rescued job: the abandoned attempt left none of its own."""
    if reason is RescueReason.WORKER_DEAD:
        return f"attempt abandoned: worker {worker_id} stopped heartbeating and was presumed dead"
    return f"attempt abandoned: the lease held by worker {worker_id} expired"


def rescued(job: Job, reason: RescueReason, now: datetime) -> Job:
    """A running job returned to pending without its worker's word, the rescue recorded."""
    message = rescue_error(reason, job.leased_by)
    return replace(
        job,
        status=JobStatus.PENDING,
        leased_by=None,
        leased_until=None,
        rescued_at=now,
        rescued_from=job.leased_by,
        rescue_reason=reason.value,
        last_attempt_error=message,
        attempt_errors=abandoned(job, message, now),
    )


def lapsed(row: WorkerInfo, now: datetime) -> bool:
    """A worker that promised to heartbeat and let ``alive_until`` pass: presumed dead."""
    return row.state in ALIVE_STATES and row.alive_until < now


def presumed_dead(row: WorkerInfo, now: datetime) -> bool:
    """Lapsed, or already marked dead: what ``workers_list`` reports as ``dead``."""
    return row.state is WorkerState.DEAD or lapsed(row, now)


# ---------------------------------------------------------------- reaping


def jobs_reap_expired(ctx: Ctx, params: JobsReapExpired, now: datetime) -> list[Job]:
    store = ctx.store  # params.limit >= 1: JobsReapExpired checks it when built
    excluded = set(params.exclude_job_ids)
    leases = [store.running[name] for name in unique(params.type_names) if name in store.running]
    chosen: list[str] = []
    for leased_until, job_id in heapq.merge(*leases):
        if leased_until >= now or len(chosen) == params.limit:
            break
        if job_id not in excluded and not ctx.skipped(job_id):  # SKIP LOCKED
            chosen.append(job_id)
    # Mutate only after the walk: the lease indexes are being iterated above.
    return [ctx.put(rescued(store.jobs[job_id], RescueReason.LEASE_EXPIRED, now)) for job_id in chosen]


# ---------------------------------------------------------------- heartbeat


def fenced(own: WorkerInfo | None, stored: int, incarnation: int) -> bool:
    """A heartbeat of ``incarnation`` against the stored row (``stored`` its incarnation) that
    must write nothing: a late one of an earlier life, or one of the life presumed dead."""
    if own is None:
        return False
    return incarnation < stored or (own.state is WorkerState.DEAD and incarnation <= stored)


def worker_heartbeat(ctx: Ctx, params: WorkerHeartbeat, now: datetime) -> WorkerHeartbeatResult:
    table = ctx.store.workers
    holder = table.try_lock(ctx.tx, params.worker_id)  # a concurrent write of our row: wait for it
    if holder is not None:
        raise Blocked(holder)
    own = table.rows.get(params.worker_id)  # ours now: the committed row or our own write
    if fenced(own, table.incarnations.get(params.worker_id, 0), params.incarnation):
        # A presumed-dead worker writes nothing, and rescues nobody (see WorkerHeartbeat). Its
        # row stays locked to the end of the transaction, unchanged, as PostgreSQL's would.
        return WorkerHeartbeatResult(was_dead=True, next_lease_expiry=_next_lease_expiry(ctx, params, now))
    row = WorkerInfo(
        id=params.worker_id,
        name=params.name,
        host=params.host,
        pid=params.pid,
        version=params.version,
        type_names=tuple(params.type_names),
        concurrency=params.concurrency,
        inflight=params.inflight,
        buffered=params.buffered,
        committing=params.committing,
        capacity=params.capacity,
        state=params.state,
        started_at=own.started_at if own is not None else now,
        last_seen_at=now,
        alive_until=now + params.alive_for,
    )
    table.put(ctx.tx, params.worker_id, row, params.incarnation)
    released: list[Job] = []
    dead_ids: list[str] = []
    if params.release_dead:
        dead_ids = _mark_dead(ctx, params.worker_id, now)
        released = _release_jobs(ctx, dead_ids, now)
    _prune(ctx, {params.worker_id, *dead_ids}, now - params.prune_after)
    return WorkerHeartbeatResult(
        released_jobs=released,
        dead_worker_ids=dead_ids,
        next_lease_expiry=_next_lease_expiry(ctx, params, now),
    )


def _next_lease_expiry(ctx: Ctx, params: WorkerHeartbeat, now: datetime) -> timedelta | None:
    expiry = ctx.view.earliest_lease(params.type_names, params.worker_id)
    return None if expiry is None else max(timedelta(0), expiry - now)


def _writable(table: WorkerTable, tx: TxState, excluded: set[str]) -> list[WorkerInfo]:
    """Rows this transaction may change now, but ``excluded`` (rows held elsewhere are skipped)."""
    return [
        row
        for worker_id, row in table.rows.items()
        if worker_id not in excluded and not table.locked_elsewhere(tx, worker_id)
    ]


def _mark_dead(ctx: Ctx, caller: str, now: datetime) -> list[str]:
    table = ctx.store.workers
    dying = [row for row in _writable(table, ctx.tx, {caller}) if lapsed(row, now)]
    for row in dying:  # after the walk: the table is being iterated above
        table.try_lock(ctx.tx, row.id)  # free: _writable skipped rows held elsewhere
        table.put(ctx.tx, row.id, replace(row, state=WorkerState.DEAD))
    return sorted(row.id for row in dying)


def _release_jobs(ctx: Ctx, worker_ids: list[str], now: datetime) -> list[Job]:
    store = ctx.store
    released = [
        ctx.put(rescued(store.jobs[job_id], RescueReason.WORKER_DEAD, now))
        for worker_id in worker_ids
        for job_id in sorted(store.leased.get(worker_id, ()))  # a copy: put() updates the index
        if not ctx.skipped(job_id)  # SKIP LOCKED
    ]
    released.sort(key=created_key)
    return released


def _prune(ctx: Ctx, kept: set[str], cutoff: datetime) -> None:
    """Delete rows lapsed before ``cutoff``, except ``kept``: the caller, and the workers this
    heartbeat just marked dead (a later one deletes them; they list as dead until then)."""
    table = ctx.store.workers
    for row in [row for row in _writable(table, ctx.tx, kept) if row.alive_until < cutoff]:
        table.try_lock(ctx.tx, row.id)
        table.put(ctx.tx, row.id, None)


# ---------------------------------------------------------------- listing


def workers_list(
    table: WorkerTable, viewer: TxState | None, params: WorkersList, now: datetime
) -> list[WorkerInfo]:
    """The rows ``viewer`` sees, a lapsed worker reported ``dead``; newest start first, then id."""
    wanted = set(params.states)
    rows = [
        replace(row, state=WorkerState.DEAD) if presumed_dead(row, now) else row
        for row in table.visible(viewer)
    ]
    rows = [row for row in rows if not wanted or row.state in wanted]
    rows.sort(key=lambda row: row.id)
    rows.sort(key=lambda row: row.started_at, reverse=True)  # stable: ties stay in id order
    return rows
