"""Shared arrange and read helpers of the queue_stats suite modules."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from jobchain.contracts import JobsList, StateAdapter
from jobchain.entities import Job
from jobchain.stats import QueueStats, TypeStats
from jobchain_conformance.helpers import (
    LEASE,
    WORKER,
    acquire_job,
    attempt_error,
    complete,
    fail,
    start,
)


def counts(stats: TypeStats) -> dict[str, int]:
    """The count figures of one type, named (for readable failures)."""
    return {
        "blocked": stats.blocked,
        "pending": stats.pending,
        "due": stats.due,
        "scheduled": stats.scheduled,
        "running": stats.running,
        "expired_leases": stats.expired_leases,
        "completed": stats.completed,
        "failed": stats.failed,
        "cancelled": stats.cancelled,
    }


def zeros(**figures: int) -> dict[str, int]:
    """:func:`counts` of a type with only ``figures`` set."""
    return {**dict.fromkeys(counts(TypeStats(type_name="")), 0), **figures}


def names(stats: QueueStats) -> list[str]:
    return [item.type_name for item in stats.types]


def type_stats(stats: QueueStats, type_name: str) -> TypeStats:
    """The listed figures of ``type_name``, which must be listed."""
    assert type_name in names(stats), f"{type_name!r} is not listed in {names(stats)}"
    return stats.get(type_name)


async def running(
    adapter: StateAdapter, now: datetime, *, type_name: str, worker_id: str = WORKER, lease: timedelta = LEASE
) -> Job:
    """A new job of ``type_name`` (no other pending job of that type) claimed at ``now``."""
    job = await start(adapter, now=now, type_name=type_name)
    return await acquire_job(adapter, job, now=now, worker_id=worker_id, lease_for=lease)


async def failed_with(adapter: StateAdapter, now: datetime, *, type_name: str, error_type: str | None) -> Job:
    """A new job failed at ``now`` without a worker, its history one entry (none for None)."""
    job = await start(adapter, now=now, type_name=type_name)
    entry = None if error_type is None else attempt_error(0, at=now, error_type=error_type)
    return (await fail(adapter, job.id, now=now, attempt_error=entry)).job


async def start_completed_of(adapter: StateAdapter, now: datetime, type_name: str) -> Job:
    job = await start(adapter, now=now, type_name=type_name)
    return (await complete(adapter, job.id, now=now)).job


async def leased(
    adapter: StateAdapter,
    worker_ids: Sequence[str],
    *,
    type_names: Sequence[str] = (),
    statuses: Sequence[str] = (),
) -> list[Job]:
    params = JobsList(leased_by=worker_ids, type_names=type_names, statuses=statuses, limit=100)
    async with adapter.transaction(read_only=True) as tx:
        return (await tx.jobs_list(params)).items
