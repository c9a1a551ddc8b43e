"""Isolation and concurrency: read-only transactions never see uncommitted writes and never
wait for writers; concurrent transactions neither deadlock nor double-dispatch.

A writer is held open with an ``asyncio.Event`` while another task reads. Adapters that
serialize writers (one write transaction at a time) pass every case here: no case makes a
write transaction wait for another one that is itself waiting.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from datetime import datetime, timedelta
from typing import Any, TypeVar

import pytest

from jobchain.contracts import (
    BlockedJobsList,
    ChainGet,
    ChainJobsList,
    ChainsDelete,
    ChainsList,
    JobBlockersGet,
    JobComplete,
    JobGet,
    JobNextAvailable,
    JobsAcquire,
    JobsCreate,
    JobsList,
    StateAdapter,
    StateTx,
)
from jobchain.entities import Chain, Job, JobStatus
from jobchain_conformance.helpers import (
    LEASE,
    TYPE,
    WORKER,
    continuation_of,
    find_job,
    get_job,
    ids,
    new_job,
    start,
)
from jobchain_conformance.suites.state_transactions import RollbackError, rolls_back

T = TypeVar("T")
TIMEOUT = 10.0
"""Seconds after which a case that should not wait is declared deadlocked."""


@asynccontextmanager
async def open_writer(
    adapter: StateAdapter, write: Callable[[StateTx], Awaitable[Any]]
) -> AsyncIterator[None]:
    """Run ``write`` in a write transaction held open (uncommitted) for the ``async with`` body.

    The transaction commits when the body ends; a body that raises rolls it back.
    """
    written, release = asyncio.Event(), asyncio.Event()
    failure: list[BaseException] = []

    async def writer() -> None:
        async with adapter.transaction() as tx:
            await write(tx)
            written.set()
            await release.wait()
            if failure:
                raise RollbackError

    task = asyncio.create_task(writer())
    try:
        waiter = asyncio.create_task(written.wait())
        done, _ = await asyncio.wait({task, waiter}, timeout=TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if task in done:
            task.result()  # surfaces the writer's own error
        assert written.is_set(), f"the writer did not finish writing within {TIMEOUT} s"
        try:
            yield
        except BaseException as error:
            failure.append(error)
            raise
    finally:
        release.set()
        with suppress(RollbackError):
            await asyncio.wait_for(task, TIMEOUT)


async def read(adapter: StateAdapter, op: Callable[[StateTx], Awaitable[T]]) -> T:
    """Run ``op`` in a read-only transaction; it must not wait for open writers."""

    async def run() -> T:
        async with adapter.transaction(read_only=True) as tx:
            return await op(tx)

    try:
        return await asyncio.wait_for(run(), TIMEOUT)
    except TimeoutError:
        pytest.fail(f"a read-only transaction waited more than {TIMEOUT} s for an open writer")


async def locked_read_beside_rollback(
    adapter: StateAdapter, write: Callable[[StateTx], Awaitable[Any]], op: Callable[[StateTx], Awaitable[T]]
) -> T:
    """Run ``op`` (a locked read) in a write transaction while another transaction holds
    ``write`` uncommitted and then rolls it back; return what ``op`` read."""
    written = asyncio.Event()

    async def writer() -> None:
        with rolls_back():
            async with adapter.transaction() as tx:
                await write(tx)
                written.set()
                # Let the locked reader start and block (or queue) behind us, then roll back.
                await asyncio.wait({reader}, timeout=0.1)
                raise RollbackError

    async def locked_reader() -> T:
        await written.wait()
        async with adapter.transaction() as tx:
            return await op(tx)

    reader = asyncio.create_task(locked_reader())
    await asyncio.wait_for(asyncio.gather(writer(), reader), TIMEOUT)
    return reader.result()


def _acquire(now: datetime, type_name: str = TYPE, limit: int = 1, worker_id: str = WORKER) -> JobsAcquire:
    return JobsAcquire(type_names=[type_name], worker_id=worker_id, lease_for=LEASE, limit=limit, now=now)


async def _create(tx: StateTx, *jobs: Any, now: datetime) -> None:
    await tx.jobs_create(JobsCreate(jobs=list(jobs), now=now))


class ReadIsolationTests:
    """A read-only transaction does not observe another transaction's uncommitted writes."""

    async def test_job_get_does_not_observe_an_uncommitted_insert(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = new_job()
        async with open_writer(state_adapter, lambda tx: _create(tx, job, now=now)):
            assert await read(state_adapter, lambda tx: tx.job_get(JobGet(job_id=job.id))) is None
        assert await find_job(state_adapter, job.id) is not None

    async def test_job_get_does_not_observe_an_uncommitted_status_update(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        async with open_writer(state_adapter, lambda tx: tx.jobs_acquire(_acquire(now))):
            seen = await read(state_adapter, lambda tx: tx.job_get(JobGet(job_id=job.id)))
            assert seen is not None
            assert (seen.status, seen.attempt) == (JobStatus.PENDING, 0)
        assert (await get_job(state_adapter, job.id)).status is JobStatus.RUNNING

    async def test_job_get_does_not_observe_an_uncommitted_delete(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        async with open_writer(state_adapter, lambda tx: tx.chains_delete(ChainsDelete(chain_ids=[job.id]))):
            assert await read(state_adapter, lambda tx: tx.job_get(JobGet(job_id=job.id))) is not None
        assert await find_job(state_adapter, job.id) is None

    async def test_jobs_list_does_not_observe_an_uncommitted_insert(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        existing = await start(state_adapter, now=now)
        async with open_writer(state_adapter, lambda tx: _create(tx, new_job(), now=now)):
            page = await read(state_adapter, lambda tx: tx.jobs_list(JobsList()))
            assert ids(page.items) == [existing.id]
        assert len((await read(state_adapter, lambda tx: tx.jobs_list(JobsList()))).items) == 2

    async def test_chain_get_does_not_observe_an_uncommitted_chain(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = new_job()
        async with open_writer(state_adapter, lambda tx: _create(tx, job, now=now)):
            assert await read(state_adapter, lambda tx: tx.chain_get(ChainGet(chain_id=job.id))) is None
        assert await read(state_adapter, lambda tx: tx.chain_get(ChainGet(chain_id=job.id))) is not None

    async def test_chains_list_does_not_observe_an_uncommitted_chain(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        existing = await start(state_adapter, now=now)
        async with open_writer(state_adapter, lambda tx: _create(tx, new_job(), now=now)):
            page = await read(state_adapter, lambda tx: tx.chains_list(ChainsList()))
            assert [chain.id for chain in page.items] == [existing.id]
        assert len((await read(state_adapter, lambda tx: tx.chains_list(ChainsList()))).items) == 2

    async def test_chain_jobs_list_does_not_observe_an_uncommitted_continuation(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now)
        async with open_writer(state_adapter, lambda tx: _create(tx, continuation_of(root), now=now)):
            page = await read(state_adapter, lambda tx: tx.chain_jobs_list(ChainJobsList(chain_id=root.id)))
            assert ids(page.items) == [root.id]
        page = await read(state_adapter, lambda tx: tx.chain_jobs_list(ChainJobsList(chain_id=root.id)))
        assert len(page.items) == 2

    async def test_job_blockers_get_does_not_observe_an_uncommitted_blocker_completion(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        dependent = await start(state_adapter, now=now, blocker_chain_ids=[blocker.id])

        def blockers(tx: StateTx) -> Awaitable[list[Chain]]:
            return tx.job_blockers_get(JobBlockersGet(job_id=dependent.id))

        async with open_writer(
            state_adapter, lambda tx: tx.job_complete(JobComplete(job_id=blocker.id, now=now))
        ):
            assert [chain.status for chain in await read(state_adapter, blockers)] == [JobStatus.PENDING]
            seen = await read(state_adapter, lambda tx: tx.job_get(JobGet(job_id=dependent.id)))
            assert seen is not None
            assert seen.status is JobStatus.BLOCKED
        assert [chain.status for chain in await read(state_adapter, blockers)] == [JobStatus.COMPLETED]

    async def test_blocked_jobs_list_does_not_observe_an_uncommitted_blocked_job(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        dependent = new_job(blocker_chain_ids=[blocker.id])

        def blocked(tx: StateTx) -> Awaitable[Any]:
            return tx.blocked_jobs_list(BlockedJobsList(blocker_chain_id=blocker.id))

        async with open_writer(state_adapter, lambda tx: _create(tx, dependent, now=now)):
            assert (await read(state_adapter, blocked)).items == []
        assert ids((await read(state_adapter, blocked)).items) == [dependent.id]

    async def test_job_next_available_does_not_observe_an_uncommitted_insert(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        def next_available(tx: StateTx) -> Awaitable[timedelta | None]:
            return tx.job_next_available(JobNextAvailable(type_names=[TYPE], now=now))

        async with open_writer(state_adapter, lambda tx: _create(tx, new_job(), now=now)):
            assert await read(state_adapter, next_available) is None
        assert await read(state_adapter, next_available) == timedelta(0)

    async def test_locked_job_get_does_not_observe_an_uncommitted_status_update(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        seen = await locked_read_beside_rollback(
            state_adapter,
            lambda tx: tx.jobs_acquire(_acquire(now)),
            lambda tx: tx.job_get(JobGet(job_id=job.id, lock=True)),
        )
        assert seen is not None
        assert (seen.status, seen.attempt, seen.leased_by) == (JobStatus.PENDING, 0, None)

    async def test_locked_chain_get_does_not_observe_an_uncommitted_continuation(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now)
        seen = await locked_read_beside_rollback(
            state_adapter,
            lambda tx: _create(tx, continuation_of(root), now=now),
            lambda tx: tx.chain_get(ChainGet(chain_id=root.id, lock=True)),
        )
        assert seen is not None
        assert (seen.root.id, seen.last.id) == (root.id, root.id)


class ConcurrencyTests:
    """Concurrent transactions: all commit, none deadlock, no job is claimed twice."""

    async def test_parallel_transactions_all_commit(self, state_adapter: StateAdapter, now: datetime) -> None:
        jobs = [new_job() for _ in range(10)]

        async def insert(job: Any) -> None:
            async with state_adapter.transaction() as tx:
                await _create(tx, job, now=now)

        await asyncio.wait_for(asyncio.gather(*(insert(job) for job in jobs)), TIMEOUT)
        page = await read(state_adapter, lambda tx: tx.jobs_list(JobsList()))
        assert sorted(ids(page.items)) == sorted(job.id for job in jobs)

    async def test_parallel_read_only_transactions_return_correct_results(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        jobs = [await start(state_adapter, now=now, input={"n": n}) for n in range(10)]

        async def read_input(job: Job) -> Any:
            seen = await read(state_adapter, lambda tx: tx.job_get(JobGet(job_id=job.id)))
            assert seen is not None
            return seen.input

        inputs = await asyncio.wait_for(asyncio.gather(*(read_input(job) for job in jobs)), TIMEOUT)
        assert inputs == [{"n": n} for n in range(10)]

    async def test_parallel_writes_and_read_only_reads_do_not_deadlock(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        seeded = await start(state_adapter, now=now)

        async def write() -> None:
            async with state_adapter.transaction() as tx:
                await _create(tx, new_job(), now=now)
                await tx.job_get(JobGet(job_id=seeded.id))

        async def read_one() -> None:
            assert await read(state_adapter, lambda tx: tx.job_get(JobGet(job_id=seeded.id))) is not None

        work = [write() if n % 2 else read_one() for n in range(20)]
        await asyncio.wait_for(asyncio.gather(*work), TIMEOUT)
        assert len((await read(state_adapter, lambda tx: tx.jobs_list(JobsList()))).items) == 11

    async def test_parallel_acquisitions_never_claim_a_job_twice(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        jobs = [await start(state_adapter, now=now + timedelta(seconds=n)) for n in range(10)]

        async def claim(worker: int) -> list[str]:
            async with state_adapter.transaction() as tx:
                acquired = await tx.jobs_acquire(
                    _acquire(now + timedelta(minutes=1), limit=3, worker_id=f"w{worker}")
                )
            return ids(acquired.jobs)

        claims = await asyncio.wait_for(asyncio.gather(*(claim(worker) for worker in range(5))), TIMEOUT)
        claimed = [job_id for batch in claims for job_id in batch]
        assert len(claimed) == len(set(claimed)), f"a job was handed to two callers: {claims}"
        assert sorted(claimed) == sorted(job.id for job in jobs)

    async def test_chain_blocked_by_a_concurrently_completing_chain_is_not_stranded(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        dependent = new_job(blocker_chain_ids=[blocker.id])
        completing = asyncio.Event()

        async def complete_blocker() -> None:
            async with state_adapter.transaction() as tx:
                await tx.job_complete(JobComplete(job_id=blocker.id, now=now))
                completing.set()
                # Let the dependent's insert run (or queue) while the completion is uncommitted.
                await asyncio.wait({inserting}, timeout=0.1)

        async def insert_dependent() -> None:
            await completing.wait()
            async with state_adapter.transaction() as tx:
                await _create(tx, dependent, now=now)

        inserting = asyncio.create_task(insert_dependent())
        await asyncio.wait_for(asyncio.gather(complete_blocker(), inserting), TIMEOUT)
        stored = await get_job(state_adapter, dependent.id)
        assert stored.status is JobStatus.PENDING, "the dependent stayed blocked by a completed chain"
