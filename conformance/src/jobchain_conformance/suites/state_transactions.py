"""transaction() and savepoint(): commit, rollback, nesting and recovery; close().

A transaction commits when its block returns and rolls back, re-raising, when it raises.
Rollback must restore every row and every index the adapter keeps (pending order,
leases, blockers, listings), which the cases check through the public operations.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TypeVar

import pytest

from jobchain.contracts import (
    BlockedJobsList,
    Capability,
    ChainsDelete,
    ChainsList,
    JobComplete,
    JobGet,
    JobsAcquire,
    JobsCreate,
    JobsList,
    JobsTrigger,
    StateAdapter,
    StateTx,
)
from jobchain.entities import JobStatus, Schedule
from jobchain_conformance.capabilities import requires
from jobchain_conformance.helpers import (
    LEASE,
    TYPE,
    WORKER,
    acquire,
    acquire_job,
    blockers_of,
    continue_chain,
    find_chain,
    find_job,
    get_chain,
    get_job,
    ids,
    new_job,
    next_available,
    start,
)
from jobchain_conformance.suites._base import PoisonTransaction

T = TypeVar("T")


class RollbackError(Exception):
    """Raised by a case to roll a transaction or savepoint back."""


class Caught:
    """What :func:`rolls_back` caught."""

    error: RollbackError | None = None


@contextmanager
def rolls_back() -> Iterator[Caught]:
    """The block must end by raising RollbackError; it is caught here and kept for the case."""
    caught = Caught()
    try:
        yield caught
    except RollbackError as error:
        caught.error = error
    else:
        raise AssertionError("the block was expected to raise RollbackError")


async def rolled_back(adapter: StateAdapter, op: Callable[[StateTx], Awaitable[T]]) -> T:
    """Run ``op`` in a transaction that then raises, and return what ``op`` returned."""
    result: list[T] = []
    with rolls_back():
        async with adapter.transaction() as tx:
            result.append(await op(tx))
            raise RollbackError
    return result[0]


def _acquire(type_name: str, now: datetime, limit: int = 1) -> JobsAcquire:
    return JobsAcquire(type_names=[type_name], worker_id=WORKER, lease_for=LEASE, limit=limit, now=now)


class TransactionTests:
    """StateAdapter.transaction(): commit on return, roll back and re-raise on error."""

    async def test_transaction_reads_its_own_uncommitted_writes(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = new_job()
        async with state_adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[job], now=now))
            seen = await tx.job_get(JobGet(job_id=job.id))
        assert seen is not None
        assert seen.id == job.id

    async def test_committed_transaction_is_visible_to_later_transactions(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = new_job()
        async with state_adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[job], now=now))
        stored = await find_job(state_adapter, job.id)
        assert stored is not None
        assert stored.status is JobStatus.PENDING

    async def test_rollback_discards_created_jobs_and_reraises(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = new_job()
        error = RollbackError("the case's own error")
        with rolls_back() as raised:
            async with state_adapter.transaction() as tx:
                await tx.jobs_create(JobsCreate(jobs=[job], now=now))
                raise error
        assert raised.error is error
        assert await find_job(state_adapter, job.id) is None
        assert await find_chain(state_adapter, job.id) is None

    async def test_rollback_restores_an_updated_job(self, state_adapter: StateAdapter, now: datetime) -> None:
        job = await start(state_adapter, now=now)
        claimed = await rolled_back(state_adapter, lambda tx: tx.jobs_acquire(_acquire(TYPE, now)))
        assert ids(claimed.jobs) == [job.id]
        restored = await get_job(state_adapter, job.id)
        assert restored.status is JobStatus.PENDING
        assert restored.attempt == job.attempt
        assert restored.leased_by is None
        assert restored.lease_generation == job.lease_generation
        assert ids((await acquire(state_adapter, now=now)).jobs) == [job.id]

    async def test_rollback_revives_deleted_chains(self, state_adapter: StateAdapter, now: datetime) -> None:
        root = await start(state_adapter, now=now)
        last = await continue_chain(state_adapter, root, now=now)
        deleted = await rolled_back(
            state_adapter, lambda tx: tx.chains_delete(ChainsDelete(chain_ids=[root.id]))
        )
        assert [chain.id for chain in deleted.chains] == [root.id]
        chain = await get_chain(state_adapter, root.id)
        assert (chain.root.id, chain.last.id) == (root.id, last.id)
        assert await find_job(state_adapter, last.id) is not None

    async def test_rollback_restores_blocker_state(self, state_adapter: StateAdapter, now: datetime) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        dependent = await start(state_adapter, now=now, type_name="dependent", blocker_chain_ids=[blocker.id])
        assert dependent.status is JobStatus.BLOCKED
        completed = await rolled_back(
            state_adapter, lambda tx: tx.job_complete(JobComplete(job_id=blocker.id, now=now))
        )
        assert ids(completed.unblocked_jobs) == [dependent.id]
        assert (await get_job(state_adapter, blocker.id)).status is JobStatus.PENDING
        assert (await get_job(state_adapter, dependent.id)).status is JobStatus.BLOCKED
        assert [chain.id for chain in await blockers_of(state_adapter, dependent.id)] == [blocker.id]
        async with state_adapter.transaction(read_only=True) as tx:
            page = await tx.blocked_jobs_list(BlockedJobsList(blocker_chain_id=blocker.id))
        assert ids(page.items) == [dependent.id]
        assert (await acquire(state_adapter, now=now, type_names=["dependent"])).jobs == []

    async def test_rollback_does_not_discard_a_concurrent_transactions_commit(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        discarded, kept = new_job(), new_job()
        written = asyncio.Event()

        async def other_writer() -> None:
            await written.wait()
            async with state_adapter.transaction() as tx:
                await tx.jobs_create(JobsCreate(jobs=[kept], now=now))

        other = asyncio.create_task(other_writer())
        with rolls_back():
            async with state_adapter.transaction() as tx:
                await tx.jobs_create(JobsCreate(jobs=[discarded], now=now))
                written.set()
                # Give the other writer a chance to run (or queue behind us) before rolling back.
                await asyncio.wait({other}, timeout=0.05)
                raise RollbackError
        await asyncio.wait_for(other, 10)
        assert await find_job(state_adapter, discarded.id) is None
        assert await find_job(state_adapter, kept.id) is not None

    async def test_rollback_of_mixed_mutations_leaves_every_index_consistent(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        ready = await start(state_adapter, now=now)
        later = await start(state_adapter, now=now, schedule=Schedule(at=now + timedelta(hours=1)))
        doomed = await start(state_adapter, now=now, type_name="other")
        before_chains = await _chain_statuses(state_adapter)
        before_jobs = await _job_statuses(state_adapter)

        async def mutate(tx: StateTx) -> None:
            await tx.jobs_create(JobsCreate(jobs=[new_job()], now=now))
            await tx.jobs_acquire(_acquire(TYPE, now))
            await tx.jobs_trigger(JobsTrigger(job_ids=[later.id], now=now))
            await tx.jobs_acquire(_acquire(TYPE, now))
            await tx.chains_delete(ChainsDelete(chain_ids=[doomed.id]))

        await rolled_back(state_adapter, mutate)
        assert await _chain_statuses(state_adapter) == before_chains
        assert await _job_statuses(state_adapter) == before_jobs
        assert await next_available(state_adapter, now=now) == timedelta(0)
        claimed = await acquire(state_adapter, now=now, limit=5)
        assert ids(claimed.jobs) == [ready.id]
        assert claimed.has_more is False
        assert (await acquire_job(state_adapter, doomed, now=now)).status is JobStatus.RUNNING


async def _chain_statuses(adapter: StateAdapter) -> list[tuple[str, str, JobStatus]]:
    async with adapter.transaction(read_only=True) as tx:
        page = await tx.chains_list(ChainsList(order="asc"))
    return sorted((chain.id, chain.last.id, chain.status) for chain in page.items)


async def _job_statuses(adapter: StateAdapter) -> list[tuple[str, JobStatus, int]]:
    async with adapter.transaction(read_only=True) as tx:
        page = await tx.jobs_list(JobsList(order="asc"))
    return sorted((job.id, job.status, job.attempt) for job in page.items)


@requires(Capability.SAVEPOINTS)
class SavepointTests:
    """StateTx.savepoint(): released on success, rolled back (and re-raised) on error."""

    async def test_released_savepoint_commits_with_the_outer_transaction(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = new_job()
        async with state_adapter.transaction() as tx:
            async with tx.savepoint() as sp:
                await sp.jobs_create(JobsCreate(jobs=[job], now=now))
            assert await tx.job_get(JobGet(job_id=job.id)) is not None
        assert await find_job(state_adapter, job.id) is not None

    async def test_savepoint_rollback_discards_its_changes(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = new_job()
        async with state_adapter.transaction() as tx:
            with rolls_back():
                async with tx.savepoint() as sp:
                    await sp.jobs_create(JobsCreate(jobs=[job], now=now))
                    raise RollbackError
            assert await tx.job_get(JobGet(job_id=job.id)) is None
        assert await find_job(state_adapter, job.id) is None

    async def test_savepoint_rollback_keeps_the_outer_transactions_changes(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        outer, inner = new_job(), new_job()
        async with state_adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[outer], now=now))
            with rolls_back():
                async with tx.savepoint() as sp:
                    await sp.jobs_create(JobsCreate(jobs=[inner], now=now))
                    raise RollbackError
            after = new_job()
            await tx.jobs_create(JobsCreate(jobs=[after], now=now))
        assert await find_job(state_adapter, outer.id) is not None
        assert await find_job(state_adapter, after.id) is not None
        assert await find_job(state_adapter, inner.id) is None

    async def test_savepoint_rollback_restores_updated_rows(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        async with state_adapter.transaction() as tx:
            with rolls_back():
                async with tx.savepoint() as sp:
                    assert ids((await sp.jobs_acquire(_acquire(TYPE, now))).jobs) == [job.id]
                    raise RollbackError
            reclaimed = await tx.jobs_acquire(_acquire(TYPE, now))
        assert ids(reclaimed.jobs) == [job.id]
        assert reclaimed.jobs[0].attempt == job.attempt + 1
        assert (await get_job(state_adapter, job.id)).attempt == job.attempt + 1

    async def test_nested_savepoints_roll_back_independently(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first, second, third = new_job(), new_job(), new_job()
        async with state_adapter.transaction() as tx, tx.savepoint() as outer_sp:
            await outer_sp.jobs_create(JobsCreate(jobs=[first], now=now))
            with rolls_back():
                async with outer_sp.savepoint() as inner_sp:
                    await inner_sp.jobs_create(JobsCreate(jobs=[second], now=now))
                    raise RollbackError
            async with outer_sp.savepoint() as released_sp:
                await released_sp.jobs_create(JobsCreate(jobs=[third], now=now))
        assert await find_job(state_adapter, first.id) is not None
        assert await find_job(state_adapter, second.id) is None
        assert await find_job(state_adapter, third.id) is not None

    async def test_outer_rollback_discards_a_released_savepoint(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = new_job()
        with rolls_back():
            async with state_adapter.transaction() as tx:
                async with tx.savepoint() as sp:
                    await sp.jobs_create(JobsCreate(jobs=[job], now=now))
                raise RollbackError
        assert await find_job(state_adapter, job.id) is None

    async def test_savepoint_reraises_the_original_error(self, state_adapter: StateAdapter) -> None:
        error = RollbackError("the case's own error")
        async with state_adapter.transaction() as tx:
            with rolls_back() as raised:
                async with tx.savepoint():
                    raise error
        assert raised.error is error

    @requires(Capability.POISONABLE_TRANSACTIONS)
    async def test_savepoint_rollback_recovers_a_poisoned_transaction(
        self,
        state_adapter: StateAdapter,
        now: datetime,
        poison_transaction: PoisonTransaction | None,
    ) -> None:
        if poison_transaction is None:
            pytest.skip("the adopter provides no poison_transaction hook")
        before, after = new_job(), new_job()
        async with state_adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[before], now=now))
            with rolls_back():
                async with tx.savepoint() as sp:
                    await poison_transaction(sp)
                    raise RollbackError
            await tx.jobs_create(JobsCreate(jobs=[after], now=now))
        assert await find_job(state_adapter, before.id) is not None
        assert await find_job(state_adapter, after.id) is not None


class CloseTests:
    """StateAdapter.close()."""

    async def test_close_is_idempotent(self, state_adapter: StateAdapter) -> None:
        await state_adapter.close()
        await state_adapter.close()
