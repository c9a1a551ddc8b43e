"""Arrange helpers shared by the suite modules: job builders and one-transaction shortcuts.

Every shortcut opens its own transaction (committed on return) and passes ``now``
explicitly, so a case reads arrange → act → assert and never sleeps. These names are a
stable API for every suite module: add new helpers, never rename existing ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TypeVar

import pytest

from jobchain.contracts import (
    Capability,
    ChainGet,
    ChainsCancel,
    ChainsCancelled,
    ChainsPrune,
    ChainsPruned,
    JobBlockersGet,
    JobComplete,
    JobCompleted,
    JobCreated,
    JobFail,
    JobFailed,
    JobGet,
    JobNextAvailable,
    JobRenewLease,
    JobReschedule,
    JobsAcquire,
    JobsAcquired,
    JobsCreate,
    JobsReapExpired,
    JobsRetried,
    JobsRetry,
    JobsTrigger,
    JobsTriggered,
    NewJob,
    QueueStatsGet,
    StateAdapter,
    StateTx,
)
from jobchain.contracts.scheduling import (
    JobWait,
    JobWaited,
    PausedTypesList,
    ScheduleRegistration,
    SchedulesList,
    SchedulesRegister,
    TypesPause,
)
from jobchain.entities import (
    PRIORITY_AGING,
    AttemptError,
    Chain,
    Deduplication,
    Job,
    JsonValue,
    PausedType,
    Schedule,
    ScheduleRecord,
    TypeLimits,
    new_id,
)
from jobchain.stats import DURATION_SAMPLE, DURATION_WINDOW, STATS_WINDOWS, QueueStats

E = TypeVar("E", bound=Exception)
T = TypeVar("T")

TYPE = "t"
"""Default job type (and chain type) of the builders."""
WORKER = "worker-a"
"""Default worker id of acquire/renew/complete shortcuts."""
OTHER_WORKER = "worker-b"
"""A second worker, for ownership cases."""
LEASE = timedelta(seconds=30)
"""Default lease length of acquire/renew shortcuts."""


# ---------------------------------------------------------------- builders


def new_job(
    *,
    type_name: str = TYPE,
    chain_type_name: str | None = None,
    id: str | None = None,
    chain_id: str | None = None,
    chain_index: int = 0,
    input: JsonValue = None,
    deduplication: Deduplication | None = None,
    schedule: Schedule | None = None,
    blocker_chain_ids: Sequence[str] = (),
    trace_context: JsonValue = None,
    chain_trace_context: JsonValue = None,
    runs_after_failed_blockers: bool = False,
    priority: int = 0,
    ordering_key: str | None = None,
) -> NewJob:
    """A :class:`NewJob` starting a chain (unless ``chain_id``); chain type defaults to the job type."""
    return NewJob(
        id=id or new_id(),
        type_name=type_name,
        chain_type_name=chain_type_name or type_name,
        chain_id=chain_id,
        chain_index=chain_index,
        input=input,
        deduplication=deduplication,
        schedule=schedule,
        blocker_chain_ids=tuple(blocker_chain_ids),
        trace_context=trace_context,
        chain_trace_context=chain_trace_context,
        runs_after_failed_blockers=runs_after_failed_blockers,
        priority=priority,
        ordering_key=ordering_key,
    )


def continuation_of(
    previous: Job,
    *,
    type_name: str | None = None,
    id: str | None = None,
    input: JsonValue = None,
    schedule: Schedule | None = None,
    blocker_chain_ids: Sequence[str] = (),
) -> NewJob:
    """A :class:`NewJob` continuing ``previous``'s chain at ``previous.chain_index + 1``."""
    return new_job(
        type_name=type_name or previous.type_name,
        chain_type_name=previous.chain_type_name,
        id=id,
        chain_id=previous.chain_id,
        chain_index=previous.chain_index + 1,
        input=input,
        schedule=schedule,
        blocker_chain_ids=blocker_chain_ids,
    )


def ids(jobs: Iterable[Job]) -> list[str]:
    """The ids of ``jobs``, in order."""
    return [job.id for job in jobs]


# ---------------------------------------------------------------- creation shortcuts


async def create(adapter: StateAdapter, jobs: Sequence[NewJob], *, now: datetime) -> list[JobCreated]:
    """Insert ``jobs`` as one batch in one committed transaction."""
    async with adapter.transaction() as tx:
        return await tx.jobs_create(JobsCreate(jobs=jobs, now=now))


async def create_one(adapter: StateAdapter, job: NewJob, *, now: datetime) -> JobCreated:
    """Insert one job and return its :class:`JobCreated`."""
    created = await create(adapter, [job], now=now)
    assert len(created) == 1, f"jobs_create returned {len(created)} results for one job"
    return created[0]


async def start(
    adapter: StateAdapter,
    *,
    now: datetime,
    type_name: str = TYPE,
    chain_type_name: str | None = None,
    id: str | None = None,
    input: JsonValue = None,
    deduplication: Deduplication | None = None,
    schedule: Schedule | None = None,
    blocker_chain_ids: Sequence[str] = (),
    trace_context: JsonValue = None,
    chain_trace_context: JsonValue = None,
    runs_after_failed_blockers: bool = False,
    priority: int = 0,
    ordering_key: str | None = None,
) -> Job:
    """Start a new chain and return its root job."""
    job = new_job(
        type_name=type_name,
        chain_type_name=chain_type_name,
        id=id,
        input=input,
        deduplication=deduplication,
        schedule=schedule,
        blocker_chain_ids=blocker_chain_ids,
        trace_context=trace_context,
        chain_trace_context=chain_trace_context,
        runs_after_failed_blockers=runs_after_failed_blockers,
        priority=priority,
        ordering_key=ordering_key,
    )
    return (await create_one(adapter, job, now=now)).job


async def continue_chain(
    adapter: StateAdapter,
    previous: Job,
    *,
    now: datetime,
    type_name: str | None = None,
    id: str | None = None,
    input: JsonValue = None,
    schedule: Schedule | None = None,
    blocker_chain_ids: Sequence[str] = (),
) -> Job:
    """Append a continuation after ``previous`` and return it."""
    job = continuation_of(
        previous,
        type_name=type_name,
        id=id,
        input=input,
        schedule=schedule,
        blocker_chain_ids=blocker_chain_ids,
    )
    return (await create_one(adapter, job, now=now)).job


async def start_completed(
    adapter: StateAdapter, *, now: datetime, type_name: str = TYPE, output: JsonValue = None
) -> Job:
    """Start a chain and complete its root without a worker; returns the completed root."""
    root = await start(adapter, now=now, type_name=type_name)
    return (await complete(adapter, root.id, now=now, output=output)).job


# ---------------------------------------------------------------- reads


async def find_job(adapter: StateAdapter, job_id: str) -> Job | None:
    """Read a job (committed state), or None."""
    async with adapter.transaction(read_only=True) as tx:
        return await tx.job_get(JobGet(job_id=job_id))


async def get_job(adapter: StateAdapter, job_id: str) -> Job:
    """Read a job that must exist."""
    job = await find_job(adapter, job_id)
    assert job is not None, f"job {job_id} is missing"
    return job


async def find_chain(adapter: StateAdapter, chain_id: str) -> Chain | None:
    """Read a chain (committed state), or None."""
    async with adapter.transaction(read_only=True) as tx:
        return await tx.chain_get(ChainGet(chain_id=chain_id))


async def get_chain(adapter: StateAdapter, chain_id: str) -> Chain:
    """Read a chain that must exist."""
    chain = await find_chain(adapter, chain_id)
    assert chain is not None, f"chain {chain_id} is missing"
    return chain


async def blockers_of(adapter: StateAdapter, job_id: str) -> list[Chain]:
    """The blocker chains of a job, in declared order."""
    async with adapter.transaction(read_only=True) as tx:
        return await tx.job_blockers_get(JobBlockersGet(job_id=job_id))


async def next_available(
    adapter: StateAdapter, *, now: datetime, type_names: Sequence[str] = (TYPE,)
) -> timedelta | None:
    """Time until the earliest pending job of ``type_names`` is eligible."""
    async with adapter.transaction(read_only=True) as tx:
        return await tx.job_next_available(JobNextAvailable(type_names=type_names, now=now))


async def queue_stats(
    adapter: StateAdapter,
    *,
    now: datetime,
    type_names: Sequence[str] = (),
    windows: Sequence[timedelta] = STATS_WINDOWS,
    duration_window: timedelta = DURATION_WINDOW,
    duration_sample: int = DURATION_SAMPLE,
    throughput_window: timedelta | None = None,
    throughput_step: timedelta = timedelta(minutes=1),
) -> QueueStats:
    """Queue health at ``now``, read in a read-only transaction."""
    params = QueueStatsGet(
        type_names=type_names,
        windows=windows,
        duration_window=duration_window,
        duration_sample=duration_sample,
        throughput_window=throughput_window,
        throughput_step=throughput_step,
        now=now,
    )
    async with adapter.transaction(read_only=True) as tx:
        return await tx.queue_stats(params)


# ---------------------------------------------------------------- worker transitions


async def acquire(
    adapter: StateAdapter,
    *,
    now: datetime,
    type_names: Sequence[str] = (TYPE,),
    worker_id: str = WORKER,
    lease_for: timedelta = LEASE,
    limit: int = 1,
    type_limits: Mapping[str, TypeLimits] | None = None,
    priority_aging: timedelta = PRIORITY_AGING,
) -> JobsAcquired:
    """Claim up to ``limit`` jobs in one committed transaction."""
    params = JobsAcquire(
        type_names=type_names,
        worker_id=worker_id,
        lease_for=lease_for,
        limit=limit,
        type_limits=dict(type_limits or {}),
        priority_aging=priority_aging,
        now=now,
    )
    async with adapter.transaction() as tx:
        return await tx.jobs_acquire(params)


async def acquire_job(
    adapter: StateAdapter, job: Job, *, now: datetime, worker_id: str = WORKER, lease_for: timedelta = LEASE
) -> Job:
    """Claim ``job``, which must be the oldest eligible job of its type; returns the running job."""
    acquired = await acquire(
        adapter, now=now, type_names=[job.type_name], worker_id=worker_id, lease_for=lease_for
    )
    assert ids(acquired.jobs) == [job.id], f"expected to claim {job.id}, claimed {ids(acquired.jobs)}"
    return acquired.jobs[0]


async def complete(
    adapter: StateAdapter,
    job_id: str,
    *,
    now: datetime,
    output: JsonValue = None,
    worker_id: str | None = None,
    lease_generation: int | None = None,
) -> JobCompleted:
    """Complete a job (workerless unless ``worker_id``) in one committed transaction."""
    params = JobComplete(
        job_id=job_id, output=output, worker_id=worker_id, lease_generation=lease_generation, now=now
    )
    async with adapter.transaction() as tx:
        return await tx.job_complete(params)


async def run_and_complete(
    adapter: StateAdapter, job: Job, *, now: datetime, output: JsonValue = None, worker_id: str = WORKER
) -> JobCompleted:
    """Claim ``job`` (see :func:`acquire_job`) and complete it as its owner."""
    running = await acquire_job(adapter, job, now=now, worker_id=worker_id)
    return await complete(
        adapter,
        job.id,
        now=now,
        output=output,
        worker_id=worker_id,
        lease_generation=running.lease_generation,
    )


async def renew(
    adapter: StateAdapter,
    job_id: str,
    *,
    now: datetime,
    worker_id: str = WORKER,
    lease_for: timedelta = LEASE,
    lease_generation: int | None = None,
) -> Job:
    """Renew a lease in one committed transaction."""
    params = JobRenewLease(
        job_id=job_id, worker_id=worker_id, lease_for=lease_for, lease_generation=lease_generation, now=now
    )
    async with adapter.transaction() as tx:
        return await tx.job_renew_lease(params)


async def reschedule(
    adapter: StateAdapter,
    job_id: str,
    *,
    now: datetime,
    schedule: Schedule,
    error: str = "boom",
    worker_id: str | None = None,
    lease_generation: int | None = None,
    released: bool = False,
) -> Job:
    """Reschedule a job in one committed transaction."""
    params = JobReschedule(
        job_id=job_id,
        schedule=schedule,
        error=error,
        worker_id=worker_id,
        lease_generation=lease_generation,
        released=released,
        now=now,
    )
    async with adapter.transaction() as tx:
        return await tx.job_reschedule(params)


async def reap(
    adapter: StateAdapter,
    *,
    now: datetime,
    type_names: Sequence[str] = (TYPE,),
    exclude_job_ids: Sequence[str] = (),
    limit: int = 1,
) -> list[Job]:
    """Reap expired leases in one committed transaction."""
    params = JobsReapExpired(type_names=type_names, exclude_job_ids=exclude_job_ids, limit=limit, now=now)
    async with adapter.transaction() as tx:
        return await tx.jobs_reap_expired(params)


async def trigger(adapter: StateAdapter, job_ids: Sequence[str], *, now: datetime) -> JobsTriggered:
    """Trigger jobs in one committed transaction."""
    async with adapter.transaction() as tx:
        return await tx.jobs_trigger(JobsTrigger(job_ids=job_ids, now=now))


# ---------------------------------------------------------------- lifecycle transitions


async def fail(
    adapter: StateAdapter,
    job_id: str,
    *,
    now: datetime,
    error: str = "gave up",
    worker_id: str | None = None,
    lease_generation: int | None = None,
    attempt_error: AttemptError | None = None,
) -> JobFailed:
    """Fail a job (workerless unless ``worker_id``) in one committed transaction."""
    params = JobFail(
        job_id=job_id,
        error=error,
        worker_id=worker_id,
        lease_generation=lease_generation,
        attempt_error=attempt_error,
        now=now,
    )
    async with adapter.transaction() as tx:
        return await tx.job_fail(params)


async def cancel(
    adapter: StateAdapter,
    chain_ids: Sequence[str],
    *,
    now: datetime,
    reason: str | None = None,
    cascade: bool = False,
    include_shared: bool = False,
    dry_run: bool = False,
) -> ChainsCancelled:
    """Cancel chains in one committed transaction."""
    params = ChainsCancel(
        chain_ids=chain_ids,
        reason=reason,
        now=now,
        cascade=cascade,
        include_shared=include_shared,
        dry_run=dry_run,
    )
    async with adapter.transaction() as tx:
        return await tx.chains_cancel(params)


async def retry(
    adapter: StateAdapter, job_ids: Sequence[str], *, now: datetime, schedule: Schedule | None = None
) -> JobsRetried:
    """Retry (redrive) jobs in one committed transaction."""
    async with adapter.transaction() as tx:
        return await tx.jobs_retry(JobsRetry(job_ids=job_ids, schedule=schedule, now=now))


async def prune(adapter: StateAdapter, params: ChainsPrune) -> ChainsPruned:
    """Prune finished chains in one committed transaction."""
    async with adapter.transaction() as tx:
        return await tx.chains_prune(params)


def attempt_error(
    attempt: int,
    *,
    at: datetime,
    error_type: str = "ValueError",
    message: str = "bad",
    worker_id: str | None = None,
) -> AttemptError:
    """An :class:`AttemptError` entry for the error history."""
    return AttemptError(attempt=attempt, worker_id=worker_id, error_type=error_type, message=message, at=at)


# ---------------------------------------------------------------- scheduling controls


async def pause(
    adapter: StateAdapter, type_names: Sequence[str], *, now: datetime, paused: bool = True
) -> list[PausedType]:
    """Pause (or, ``paused=False``, resume) job types in one committed transaction."""
    async with adapter.transaction() as tx:
        return await tx.types_pause(TypesPause(type_names=type_names, paused=paused, now=now))


async def paused_types(adapter: StateAdapter) -> list[PausedType]:
    """Every paused type (committed state)."""
    async with adapter.transaction(read_only=True) as tx:
        return await tx.paused_types_list(PausedTypesList())


async def wait_for(
    adapter: StateAdapter,
    job_id: str,
    blocker_chain_ids: Sequence[str],
    *,
    now: datetime,
    worker_id: str = WORKER,
    lease_generation: int | None = None,
    runs_after_failed: bool = False,
) -> JobWaited:
    """``job_wait`` (a running job waits for chains) in one committed transaction."""
    params = JobWait(
        job_id=job_id,
        worker_id=worker_id,
        blocker_chain_ids=blocker_chain_ids,
        lease_generation=lease_generation,
        runs_after_failed=runs_after_failed,
        now=now,
    )
    async with adapter.transaction() as tx:
        return await tx.job_wait(params)


async def register_schedules(
    adapter: StateAdapter,
    schedules: Sequence[ScheduleRegistration],
    *,
    now: datetime,
    forget_before: datetime | None = None,
) -> list[ScheduleRecord]:
    """Upsert schedule registrations in one committed transaction."""
    params = SchedulesRegister(schedules=schedules, forget_before=forget_before, now=now)
    async with adapter.transaction() as tx:
        return await tx.schedules_register(params)


async def list_schedules(adapter: StateAdapter) -> list[ScheduleRecord]:
    """Every registered schedule (committed state)."""
    async with adapter.transaction(read_only=True) as tx:
        return await tx.schedules_list(SchedulesList())


# ---------------------------------------------------------------- assertions


async def refused(adapter: StateAdapter, error: type[E], op: Callable[[StateTx], Awaitable[object]]) -> E:
    """Run ``op`` in its own transaction, require it to raise ``error``, then end the tx normally.

    The transaction is committed afterwards, so anything the failed operation wrote would
    become visible to the caller's next read. On adapters whose failed statements poison
    the transaction the commit may roll back (or raise) instead, which is equally fine.
    """
    caught: E | None = None
    try:
        async with adapter.transaction() as tx:
            with pytest.raises(error) as info:
                await op(tx)
            caught = info.value
    except Exception:
        if caught is None or Capability.POISONABLE_TRANSACTIONS not in adapter.capabilities:
            raise
    assert caught is not None
    return caught


def assert_time(adapter: StateAdapter, actual: datetime | None, expected: datetime) -> None:
    """``actual`` is an aware datetime within the adapter's ``time_precision`` of ``expected``."""
    assert actual is not None, f"expected a time near {expected.isoformat()}, got None"
    assert actual.tzinfo is not None, f"{actual!r} is not timezone-aware"
    delta = abs(actual - expected)
    assert delta <= adapter.time_precision, (
        f"{actual.isoformat()} differs from {expected.isoformat()} by {delta} "
        f"(time_precision {adapter.time_precision})"
    )


def assert_duration(adapter: StateAdapter, actual: timedelta | None, expected: timedelta) -> None:
    """``actual`` is within the adapter's ``time_precision`` of ``expected``."""
    assert actual is not None, f"expected a duration near {expected}, got None"
    assert abs(actual - expected) <= adapter.time_precision, f"{actual} differs from {expected}"


async def in_transaction(adapter: StateAdapter, op: Callable[[StateTx], Awaitable[T]]) -> T:
    """Run ``op`` in its own committed write transaction and return its result."""
    async with adapter.transaction() as tx:
        return await op(tx)


async def read_while_locked(
    adapter: StateAdapter,
    *,
    lock: Callable[[StateTx], Awaitable[object]],
    change: Callable[[StateTx], Awaitable[object]],
    read: Callable[[StateTx], Awaitable[T]],
    hold: float = 0.2,
) -> T:
    """Hold ``lock`` in one transaction while ``read`` starts in a second; then ``change`` and commit.

    Returns what the second transaction read. The second read must still be waiting after
    ``hold`` seconds (a correct adapter keeps it waiting however long that is, so this never
    fails spuriously), and, having waited, it must see ``change``.
    """
    async with adapter.transaction() as holder:
        await lock(holder)
        waiter = asyncio.create_task(in_transaction(adapter, read))
        try:
            done, _ = await asyncio.wait({waiter}, timeout=hold)
            assert not done, "a second lock=True read returned while another transaction held the lock"
            await change(holder)
        except BaseException:
            waiter.cancel()
            raise
    return await asyncio.wait_for(waiter, timeout=30)
