"""The in-process adapter's ``job_wait`` (dynamic blockers) and schedule registry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobchain.contracts import (
    JobBlockersGet,
    JobComplete,
    JobFail,
    JobGet,
    JobsAcquire,
    JobsCreate,
    NewJob,
)
from jobchain.contracts.scheduling import (
    JobWait,
    JobWaited,
    ScheduleRegistration,
    SchedulesList,
    SchedulesRegister,
)
from jobchain.entities import Job, JobStatus, ScheduleRecord, new_id
from jobchain.errors import (
    ChainNotFoundError,
    InvalidArgumentError,
    JobTakenByAnotherWorkerError,
)
from jobchain.memory.state import MemoryStateAdapter

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
T1 = T0 + timedelta(seconds=5)
LEASE = timedelta(seconds=30)


@pytest.fixture
def adapter() -> MemoryStateAdapter:
    return MemoryStateAdapter(clock=lambda: T0)


def new(type_name: str = "t", *, blockers: tuple[str, ...] = ()) -> NewJob:
    return NewJob(id=new_id(), type_name=type_name, chain_type_name=type_name, blocker_chain_ids=blockers)


async def create(adapter: MemoryStateAdapter, *jobs: NewJob) -> list[Job]:
    async with adapter.transaction() as tx:
        return [created.job for created in await tx.jobs_create(JobsCreate(jobs=jobs, now=T0))]


async def running(adapter: MemoryStateAdapter) -> Job:
    """A running job of type ``w``, claimed by worker ``w``."""
    await create(adapter, new("w"))
    async with adapter.transaction() as tx:
        claimed = await tx.jobs_acquire(JobsAcquire(type_names=["w"], worker_id="w", lease_for=LEASE, now=T0))
    return claimed.jobs[0]


async def wait(
    adapter: MemoryStateAdapter, job: Job, *chains: str, runs_after_failed: bool = False
) -> JobWaited:
    async with adapter.transaction() as tx:
        return await tx.job_wait(
            JobWait(
                job_id=job.id,
                worker_id="w",
                blocker_chain_ids=chains,
                lease_generation=job.lease_generation,
                runs_after_failed=runs_after_failed,
                now=T1,
            )
        )


async def get(adapter: MemoryStateAdapter, job_id: str) -> Job:
    async with adapter.transaction(read_only=True) as tx:
        job = await tx.job_get(JobGet(job_id=job_id))
    assert job is not None
    return job


async def fail(adapter: MemoryStateAdapter, job_id: str) -> list[Job]:
    async with adapter.transaction() as tx:
        return (await tx.job_fail(JobFail(job_id=job_id, error="boom", now=T1))).unblocked_jobs


# ---------------------------------------------------------------- job_wait


async def test_waiting_blocks_the_job_without_using_its_attempt(adapter: MemoryStateAdapter) -> None:
    job = await running(adapter)
    child_a, child_b = await create(adapter, new("c"), new("c"))
    result = await wait(adapter, job, child_a.id, child_b.id, child_a.id)
    waiting = result.job
    assert waiting.status is JobStatus.BLOCKED
    assert result.incomplete_blocker_chain_ids == (child_a.id, child_b.id)
    assert (waiting.leased_by, waiting.leased_until) == (None, None)
    assert waiting.last_attempt_at == T1
    assert waiting.attempt == 1
    assert waiting.attempts_used == 0
    assert await get(adapter, job.id) == waiting
    async with adapter.transaction() as tx:
        await tx.job_complete(JobComplete(job_id=child_a.id, now=T1))
        released = await tx.job_complete(JobComplete(job_id=child_b.id, now=T1 + timedelta(seconds=1)))
    assert [j.id for j in released.unblocked_jobs] == [job.id]
    assert released.unblocked_jobs[0].scheduled_at == T1 + timedelta(seconds=1)


async def test_waiting_for_finished_chains_makes_the_job_pending_now(adapter: MemoryStateAdapter) -> None:
    job = await running(adapter)
    (done,) = await create(adapter, new("c"))
    async with adapter.transaction() as tx:
        await tx.job_complete(JobComplete(job_id=done.id, now=T0))
    result = await wait(adapter, job, done.id)
    assert result.job.status is JobStatus.PENDING
    assert result.job.scheduled_at == T1
    assert result.incomplete_blocker_chain_ids == ()
    async with adapter.transaction(read_only=True) as tx:
        blockers = await tx.job_blockers_get(JobBlockersGet(job_id=job.id))
    assert [chain.id for chain in blockers] == [done.id]


async def test_a_failed_new_blocker_fails_the_job_at_once_and_propagates(adapter: MemoryStateAdapter) -> None:
    job = await running(adapter)
    (broken,) = await create(adapter, new("c"))
    await fail(adapter, broken.id)
    (dependent,) = await create(adapter, new("d", blockers=(job.chain_id,)))
    result = await wait(adapter, job, broken.id)
    assert result.job.status is JobStatus.FAILED
    assert result.job.failed_by_chain_id == broken.id
    assert result.job.attempt_errors[-1].error_type == "BlockerChainFailed"
    assert [j.id for j in result.failed_jobs] == [dependent.id]


async def test_runs_after_failed_resolves_the_new_blockers_on_any_end(adapter: MemoryStateAdapter) -> None:
    job = await running(adapter)
    (child,) = await create(adapter, new("c"))
    result = await wait(adapter, job, child.id, runs_after_failed=True)
    assert result.job.status is JobStatus.BLOCKED
    assert [j.id for j in await fail(adapter, child.id)] == [job.id]
    assert (await get(adapter, job.id)).status is JobStatus.PENDING


async def test_without_runs_after_failed_a_later_failure_fails_the_waiting_job(
    adapter: MemoryStateAdapter,
) -> None:
    job = await running(adapter)
    (child,) = await create(adapter, new("c"))
    await wait(adapter, job, child.id)
    async with adapter.transaction() as tx:
        failed = await tx.job_fail(JobFail(job_id=child.id, error="boom", now=T1))
    assert [j.id for j in failed.failed_jobs] == [job.id]
    assert failed.failed_jobs[0].failed_by_chain_id == child.id


async def test_bad_chains_and_fencing_change_nothing(adapter: MemoryStateAdapter) -> None:
    job = await running(adapter)
    (child,) = await create(adapter, new("c"))
    with pytest.raises(ChainNotFoundError):
        await wait(adapter, job, child.id, new_id())
    with pytest.raises(InvalidArgumentError):
        await wait(adapter, job, child.id, job.chain_id)
    stale = await get(adapter, job.id)
    async with adapter.transaction() as tx:
        with pytest.raises(JobTakenByAnotherWorkerError):
            await tx.job_wait(JobWait(job_id=job.id, worker_id="other", blocker_chain_ids=[child.id], now=T1))
    assert await get(adapter, job.id) == stale
    assert stale.status is JobStatus.RUNNING
    async with adapter.transaction(read_only=True) as tx:
        assert await tx.job_blockers_get(JobBlockersGet(job_id=job.id)) == []
    with pytest.raises(InvalidArgumentError):
        JobWait(job_id=job.id, worker_id="w", blocker_chain_ids=[])


# ---------------------------------------------------------------- schedules


def registration(
    name: str, *, tick: datetime | None = None, chain: str | None = None
) -> ScheduleRegistration:
    return ScheduleRegistration(
        name=name,
        cron="0 3 * * *",
        timezone="UTC",
        type_name="report",
        catch_up=True,
        worker_name="w1",
        next_tick_at=T0 + timedelta(days=1),
        last_tick_at=tick,
        last_chain_id=chain,
    )


async def register(
    adapter: MemoryStateAdapter,
    *schedules: ScheduleRegistration,
    now: datetime,
    forget_before: datetime | None = None,
) -> list[ScheduleRecord]:
    async with adapter.transaction() as tx:
        return await tx.schedules_register(
            SchedulesRegister(schedules=schedules, forget_before=forget_before, now=now)
        )


async def test_registration_upserts_and_the_tick_only_moves_forward(adapter: MemoryStateAdapter) -> None:
    (first,) = await register(adapter, registration("a", tick=T0, chain="c1"), now=T0)
    assert (first.registered_at, first.last_seen_at, first.last_chain_id) == (T0, T0, "c1")
    (older,) = await register(adapter, registration("a", tick=T0 - timedelta(days=1), chain="c0"), now=T1)
    assert (older.registered_at, older.last_seen_at) == (T0, T1)
    assert (older.last_tick_at, older.last_chain_id) == (T0, "c1")
    (none,) = await register(adapter, registration("a"), now=T1)
    assert (none.last_tick_at, none.last_chain_id) == (T0, "c1")
    newer_tick = T0 + timedelta(days=1)
    (newer,) = await register(adapter, registration("a", tick=newer_tick, chain="c2"), now=T1)
    assert (newer.last_tick_at, newer.last_chain_id) == (newer_tick, "c2")


async def test_rows_not_seen_since_forget_before_are_deleted(adapter: MemoryStateAdapter) -> None:
    await register(adapter, registration("old"), registration("kept"), now=T0)
    later = T0 + timedelta(days=8)
    result = await register(adapter, registration("kept"), registration("b"), now=later, forget_before=T1)
    assert [record.name for record in result] == ["b", "kept"]
    async with adapter.transaction(read_only=True) as tx:
        listed = await tx.schedules_list(SchedulesList())
    assert [(r.name, r.registered_at, r.last_seen_at) for r in listed] == [
        ("b", later, later),
        ("kept", T0, later),
    ]
