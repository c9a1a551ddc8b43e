"""The in-process adapter's ordered keys (implicit blockers resolved by any end) and their
bookkeeping under delete, prune and rollback."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from jobchain.contracts import (
    ChainsCancel,
    ChainsDelete,
    ChainsPrune,
    JobBlockersGet,
    JobComplete,
    JobCreated,
    JobFail,
    JobGet,
    JobsCreate,
    JobsRetry,
    NewJob,
)
from jobchain.entities import Deduplication, Job, JobStatus, new_id
from jobchain.memory.state import MemoryStateAdapter, MemoryStateTx

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


class BoomError(Exception):
    """Rolls a savepoint back."""


@pytest.fixture
def adapter() -> MemoryStateAdapter:
    return MemoryStateAdapter(clock=lambda: T0)


def root(
    key: str | None = "k",
    *,
    type_name: str = "t",
    blockers: Sequence[str] = (),
    dedup: str | None = None,
    runs_after: bool = False,
) -> NewJob:
    return NewJob(
        id=new_id(),
        type_name=type_name,
        chain_type_name=type_name,
        ordering_key=key,
        blocker_chain_ids=tuple(blockers),
        deduplication=Deduplication(key=dedup) if dedup is not None else None,
        runs_after_failed_blockers=runs_after,
    )


async def start(adapter: MemoryStateAdapter, *jobs: NewJob) -> list[JobCreated]:
    async with adapter.transaction() as tx:
        return await tx.jobs_create(JobsCreate(jobs=jobs, now=T0))


async def get(adapter: MemoryStateAdapter, job_id: str) -> Job:
    async with adapter.transaction(read_only=True) as tx:
        job = await tx.job_get(JobGet(job_id=job_id))
    assert job is not None
    return job


async def blocker_ids(adapter: MemoryStateAdapter, job_id: str) -> list[str]:
    async with adapter.transaction(read_only=True) as tx:
        return [chain.id for chain in await tx.job_blockers_get(JobBlockersGet(job_id=job_id))]


async def test_chains_of_a_key_are_blocked_by_the_one_created_before(adapter: MemoryStateAdapter) -> None:
    first, second, other = await start(adapter, root("k"), root("k"), root("other"))
    (third,) = await start(adapter, root("k"))
    assert first.ordered_after is None
    assert first.job.status is JobStatus.PENDING
    assert first.job.ordering_key == "k"
    assert second.ordered_after == first.job.id
    assert second.job.status is JobStatus.BLOCKED
    assert second.incomplete_blocker_chain_ids == (first.job.id,)
    assert other.ordered_after is None
    assert other.job.status is JobStatus.PENDING
    assert third.ordered_after == second.job.id
    async with adapter.transaction() as tx:
        unblocked = (await tx.job_complete(JobComplete(job_id=first.job.id, now=T0))).unblocked_jobs
    assert [job.id for job in unblocked] == [second.job.id]
    assert (await get(adapter, third.job.id)).status is JobStatus.BLOCKED


async def test_the_predecessor_comes_after_the_declared_blockers_and_a_declared_one_wins(
    adapter: MemoryStateAdapter,
) -> None:
    (blocker,) = await start(adapter, root(None))
    (first,) = await start(adapter, root("k"))
    (second,) = await start(adapter, root("k", blockers=[blocker.job.id]))
    assert await blocker_ids(adapter, second.job.id) == [blocker.job.id, first.job.id]
    (third,) = await start(adapter, root("k", blockers=[second.job.id]))
    assert await blocker_ids(adapter, third.job.id) == [second.job.id]
    async with adapter.transaction() as tx:
        failed = await tx.job_fail(JobFail(job_id=second.job.id, error="x", now=T0))
    # Declared (not ordering) blocker: its failure fails the next chain.
    assert [job.id for job in failed.failed_jobs] == [third.job.id]


async def test_a_failed_or_cancelled_predecessor_lets_the_next_chain_run(adapter: MemoryStateAdapter) -> None:
    first, second, third = await start(adapter, root(), root(), root())
    async with adapter.transaction() as tx:
        failed = await tx.job_fail(JobFail(job_id=first.job.id, error="boom", now=T0))
    assert failed.failed_jobs == []
    assert [job.id for job in failed.unblocked_jobs] == [second.job.id]
    async with adapter.transaction() as tx:
        cancelled = await tx.chains_cancel(ChainsCancel(chain_ids=[second.job.id], now=T0))
    assert [job.id for job in cancelled.unblocked_jobs] == [third.job.id]
    # A retried predecessor does not block its successor again, and is not refused.
    async with adapter.transaction() as tx:
        retried = await tx.jobs_retry(JobsRetry(job_ids=[first.job.id], now=T0))
    assert [job.status for job in retried.retried] == [JobStatus.PENDING]


async def test_a_terminal_predecessor_is_a_resolved_blocker(adapter: MemoryStateAdapter) -> None:
    (first,) = await start(adapter, root())
    async with adapter.transaction() as tx:
        await tx.job_fail(JobFail(job_id=first.job.id, error="boom", now=T0))
    (second,) = await start(adapter, root())
    assert second.ordered_after == first.job.id
    assert second.incomplete_blocker_chain_ids == ()
    assert second.job.status is JobStatus.PENDING
    assert await blocker_ids(adapter, second.job.id) == [first.job.id]


async def test_a_deduplicated_start_takes_no_place_and_continuations_ignore_the_key(
    adapter: MemoryStateAdapter,
) -> None:
    first, again = await start(adapter, root(dedup="d"), root(dedup="d"))
    assert again.deduplicated
    assert again.job.id == first.job.id
    continuation = NewJob(
        id=new_id(),
        type_name="t",
        chain_type_name="t",
        chain_id=first.job.id,
        chain_index=1,
        ordering_key="k",
    )
    (step,) = await start(adapter, continuation)
    assert step.job.ordering_key is None
    assert step.ordered_after is None
    (second,) = await start(adapter, root())
    assert second.ordered_after == first.job.id


async def test_a_creation_waits_for_an_uncommitted_creation_of_its_key_only(
    adapter: MemoryStateAdapter,
) -> None:
    release = asyncio.Event()
    created = asyncio.Event()

    async def slow() -> JobCreated:
        async with adapter.transaction() as tx:
            (result,) = await tx.jobs_create(JobsCreate(jobs=[root("k")], now=T0))
            created.set()
            await release.wait()
            return result

    holder = asyncio.create_task(slow())
    await created.wait()
    (other_key,) = await asyncio.wait_for(start(adapter, root("other")), 1)  # never waits
    waiting = asyncio.create_task(start(adapter, root("k")))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    release.set()
    first = await holder
    (second,) = await waiting
    assert other_key.ordered_after is None
    assert second.ordered_after == first.job.id


async def test_a_rolled_back_creation_gives_its_key_back(adapter: MemoryStateAdapter) -> None:
    (first,) = await start(adapter, root())

    async def create_then_fail(tx: MemoryStateTx) -> None:
        async with tx.savepoint() as sp:
            await sp.jobs_create(JobsCreate(jobs=[root()], now=T0))
            raise BoomError

    async with adapter.transaction() as tx:
        with pytest.raises(BoomError):
            await create_then_fail(tx)
        (second,) = await tx.jobs_create(JobsCreate(jobs=[root()], now=T0))
    assert second.ordered_after == first.job.id


async def test_deleting_the_last_chain_of_a_key_forgets_the_key(adapter: MemoryStateAdapter) -> None:
    (first,) = await start(adapter, root())
    (second,) = await start(adapter, root())
    async with adapter.transaction() as tx:
        refused = await tx.chains_delete(ChainsDelete(chain_ids=[first.job.id]))
    assert [ref.referenced_by_job_id for ref in refused.blocker_references] == [second.job.id]
    async with adapter.transaction() as tx:
        deleted = await tx.chains_delete(ChainsDelete(chain_ids=[second.job.id]))
    assert [chain.id for chain in deleted.chains] == [second.job.id]
    (third,) = await start(adapter, root())
    assert third.ordered_after is None  # the key's last chain went: no entry left
    assert await blocker_ids(adapter, third.job.id) == []


async def test_prune_with_locks_before_deletes_entries_whose_last_chain_is_gone(
    adapter: MemoryStateAdapter,
) -> None:
    for key in ("a", "b", "c"):
        (created,) = await start(adapter, root(key))
        async with adapter.transaction() as tx:
            await tx.job_complete(JobComplete(job_id=created.job.id, now=T0))
    later = T0 + timedelta(days=2)
    async with adapter.transaction() as tx:
        kept = await tx.chains_prune(ChainsPrune(completed_before=later))
        assert len(kept.chains) == 3
        assert kept.locks_deleted == 0  # no locks_before: the entries stay (and read as no chain)
        pruned = await tx.chains_prune(ChainsPrune(completed_before=later, locks_before=later, limit=2))
        assert pruned.locks_deleted == 2
        rest = await tx.chains_prune(ChainsPrune(locks_before=later))
        assert rest.locks_deleted == 1
        again = await tx.chains_prune(ChainsPrune(locks_before=later))
        assert again.locks_deleted == 0
    (fresh,) = await start(adapter, root("a"))
    assert fresh.ordered_after is None
