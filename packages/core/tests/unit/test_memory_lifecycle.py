"""The in-process state adapter's lifecycle mechanics: holds, the prune lock, undo, cycles.

The conformance suite (``LifecycleStateTests``) covers the contract; these cases pin how the
reference model implements it: a ``job_get(lock=True)`` hold that claims, reaps and releases
skip but a cancel writes through, the one-at-a-time prune lock, propagation undone by a
rollback, and a blocker cycle that propagation walks once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest

from jobchain.contracts import (
    ChainsCancel,
    ChainsPrune,
    JobComplete,
    JobFail,
    JobGet,
    JobsAcquire,
    JobsCreate,
    JobsReapExpired,
    NewJob,
    StateTx,
    WorkerHeartbeat,
)
from jobchain.entities import Job, JobStatus, WorkerState, new_id
from jobchain.errors import JobCancelledError
from jobchain.memory.state import MemoryStateAdapter

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
TIMEOUT = 5.0


class BoomError(Exception):
    """Raised by a case to roll a transaction or savepoint back."""


Body = Callable[[StateTx], Awaitable[object]]


async def rolled_back(adapter: MemoryStateAdapter, body: Body) -> None:
    """Run ``body`` in a write transaction that then raises BoomError (and is rolled back)."""

    async def run() -> None:
        async with adapter.transaction() as tx:
            await body(tx)
            raise BoomError

    with pytest.raises(BoomError):
        await run()


async def savepoint_rolled_back(tx: StateTx, body: Body) -> None:
    """Run ``body`` in a savepoint of ``tx`` that then raises BoomError (and is rolled back)."""

    async def run() -> None:
        async with tx.savepoint() as sp:
            await body(sp)
            raise BoomError

    with pytest.raises(BoomError):
        await run()


@pytest.fixture
def adapter() -> MemoryStateAdapter:
    return MemoryStateAdapter(clock=lambda: T0)


def new(type_name: str = "t", *, blockers: tuple[str, ...] = (), chain_of: Job | None = None) -> NewJob:
    return NewJob(
        id=new_id(),
        type_name=type_name,
        chain_type_name=chain_of.chain_type_name if chain_of else type_name,
        chain_id=chain_of.chain_id if chain_of else None,
        chain_index=chain_of.chain_index + 1 if chain_of else 0,
        blocker_chain_ids=blockers,
    )


async def create(adapter: MemoryStateAdapter, *jobs: NewJob) -> list[Job]:
    async with adapter.transaction() as tx:
        return [created.job for created in await tx.jobs_create(JobsCreate(jobs=jobs))]


async def claim(adapter: MemoryStateAdapter, type_name: str = "t", *, now: datetime = T0) -> list[Job]:
    async with adapter.transaction() as tx:
        params = JobsAcquire(type_names=[type_name], worker_id="w", lease_for=LEASE, limit=10, now=now)
        return (await tx.jobs_acquire(params)).jobs


async def get(adapter: MemoryStateAdapter, job_id: str) -> Job:
    async with adapter.transaction(read_only=True) as tx:
        job = await tx.job_get(JobGet(job_id=job_id))
    assert job is not None
    return job


class TestHolds:
    """``job_get(lock=True)`` holds the row: skipped like a lock, but a cancel writes through."""

    async def test_a_held_pending_job_is_not_claimed(self, adapter: MemoryStateAdapter) -> None:
        (job,) = await create(adapter, new())
        async with adapter.transaction() as holder:
            await holder.job_get(JobGet(job_id=job.id, lock=True))
            assert await claim(adapter) == []
        assert [j.id for j in await claim(adapter)] == [job.id]

    async def test_a_held_expired_job_is_neither_reaped_nor_released(
        self, adapter: MemoryStateAdapter
    ) -> None:
        await create(adapter, new())
        (running,) = await claim(adapter)
        late = T0 + LEASE + timedelta(minutes=5)
        async with adapter.transaction() as holder:
            await holder.job_get(JobGet(job_id=running.id, lock=True))
            async with adapter.transaction() as tx:
                assert await tx.jobs_reap_expired(JobsReapExpired(type_names=["t"], limit=5, now=late)) == []
            async with adapter.transaction() as tx:
                beat = WorkerHeartbeat(
                    worker_id="other",
                    name="n",
                    host="h",
                    pid=1,
                    version="1",
                    type_names=["t"],
                    concurrency=1,
                    inflight=0,
                    state=WorkerState.RUNNING,
                    alive_for=LEASE,
                    release_dead=True,
                    now=late,
                )
                await tx.worker_heartbeat(beat)
        assert (await get(adapter, running.id)).status is JobStatus.RUNNING

    async def test_the_holders_completion_waits_for_an_open_cancel_then_is_refused(
        self, adapter: MemoryStateAdapter
    ) -> None:
        await create(adapter, new())
        (running,) = await claim(adapter)
        async with adapter.transaction() as holder:
            await holder.job_get(JobGet(job_id=running.id, lock=True))
            async with adapter.transaction() as canceller:
                cancel = canceller.chains_cancel(ChainsCancel(chain_ids=[running.id], reason="stop"))
                await asyncio.wait_for(cancel, TIMEOUT)  # through the hold: no wait
                completion = asyncio.create_task(
                    holder.job_complete(JobComplete(job_id=running.id, worker_id="w", lease_generation=1))
                )
                done, _ = await asyncio.wait({completion}, timeout=0.1)
                assert not done, "the holder's write did not wait for the uncommitted cancel"
            with pytest.raises(JobCancelledError):
                await asyncio.wait_for(completion, TIMEOUT)
        assert (await get(adapter, running.id)).status is JobStatus.CANCELLED

    async def test_a_savepoint_rollback_releases_a_hold_taken_inside_it(
        self, adapter: MemoryStateAdapter
    ) -> None:
        (job,) = await create(adapter, new())
        async with adapter.transaction() as tx:
            await savepoint_rolled_back(tx, lambda sp: sp.job_get(JobGet(job_id=job.id, lock=True)))
            assert [j.id for j in await claim(adapter)] == [job.id]

    async def test_a_hold_ends_with_its_transaction(self, adapter: MemoryStateAdapter) -> None:
        (job,) = await create(adapter, new())
        await rolled_back(adapter, lambda tx: tx.job_get(JobGet(job_id=job.id, lock=True)))
        assert [j.id for j in await claim(adapter)] == [job.id]


class TestPruneLock:
    """One prune at a time: the lock lives until the holding transaction ends."""

    async def test_the_lock_survives_a_savepoint_rollback_and_ends_with_the_transaction(
        self, adapter: MemoryStateAdapter
    ) -> None:
        async with adapter.transaction() as tx:
            await savepoint_rolled_back(tx, lambda sp: sp.chains_prune(ChainsPrune()))
            async with adapter.transaction() as other:
                assert (await other.chains_prune(ChainsPrune())).busy is True
            assert (await tx.chains_prune(ChainsPrune())).busy is False  # its own lock
        async with adapter.transaction() as other:
            assert (await other.chains_prune(ChainsPrune())).busy is False

    async def test_a_rolled_back_prune_releases_the_lock(self, adapter: MemoryStateAdapter) -> None:
        await rolled_back(adapter, lambda tx: tx.chains_prune(ChainsPrune()))
        async with adapter.transaction() as tx:
            assert (await tx.chains_prune(ChainsPrune())).busy is False


class TestPropagationMechanics:
    """Propagation is one operation: undone by a rollback, and finite on a blocker cycle."""

    async def test_a_rolled_back_failure_leaves_every_dependent_as_it_was(
        self, adapter: MemoryStateAdapter
    ) -> None:
        (blocker,) = await create(adapter, new("blocker"))
        (first,) = await create(adapter, new("first", blockers=(blocker.id,)))
        (second,) = await create(adapter, new("second", blockers=(first.id,)))
        failed: list[Job] = []

        async def fail_blocker(tx: StateTx) -> None:
            failed.extend((await tx.job_fail(JobFail(job_id=blocker.id, error="x"))).failed_jobs)

        await rolled_back(adapter, fail_blocker)
        assert {j.id for j in failed} == {first.id, second.id}
        assert [await get(adapter, j.id) for j in (blocker, first, second)] == [blocker, first, second]

    async def test_a_blocker_cycle_is_walked_once(self, adapter: MemoryStateAdapter) -> None:
        (a_root,) = await create(adapter, new("a"))
        (b_root,) = await create(adapter, new("b", blockers=(a_root.id,)))  # b waits for a
        (a_next,) = await create(
            adapter, new("a", chain_of=a_root, blockers=(b_root.id,))
        )  # a's next waits for b
        async with adapter.transaction() as tx:
            await tx.job_complete(JobComplete(job_id=a_root.id))  # a continues: b still waits for chain a
        assert (await get(adapter, b_root.id)).status is JobStatus.BLOCKED
        async with adapter.transaction() as tx:
            result = await tx.chains_cancel(ChainsCancel(chain_ids=[b_root.id]))
        assert [j.id for j in result.failed_jobs] == [a_next.id]
        assert (await get(adapter, b_root.id)).status is JobStatus.CANCELLED
