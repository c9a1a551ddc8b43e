"""The in-process worker registry: its transactional mechanics (undo, locks, preimages, the
leased-by index) and the rescue semantics the other backends are compared against.

The conformance suites (state_workers, state_rescue) cover the contract; these cases pin
what only the reference's internals can show: what each transaction sees and skips while
another one holds a row, and that every index and lock is back in order afterwards.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobchain.contracts import (
    JobGet,
    JobRenewLease,
    JobsAcquire,
    JobsCreate,
    JobsReapExpired,
    NewJob,
    WorkerHeartbeat,
    WorkerHeartbeatResult,
    WorkersList,
)
from jobchain.entities import Job, JobStatus, RescueReason, WorkerInfo, WorkerState, new_id
from jobchain.errors import InvalidArgumentError
from jobchain.memory._store import Store
from jobchain.memory._workers import rescue_error
from jobchain.memory.state import MemoryStateAdapter, MemoryStateTx

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
ALIVE = timedelta(seconds=10)
DEAD_AT = T0 + ALIVE + timedelta(seconds=5)


class BoomError(Exception):
    """Raised by a case to roll a transaction or savepoint back."""


Body = Callable[[MemoryStateTx], Awaitable[None]]


@pytest.fixture
def adapter() -> MemoryStateAdapter:
    return MemoryStateAdapter(clock=lambda: T0)


def beat(
    worker_id: str,
    *,
    now: datetime = T0,
    release_dead: bool = False,
    state: WorkerState = WorkerState.RUNNING,
    type_names: Sequence[str] = ("t",),
    prune_after: timedelta = timedelta(hours=1),
) -> WorkerHeartbeat:
    return WorkerHeartbeat(
        worker_id=worker_id,
        name=worker_id,
        host="h",
        pid=1,
        version="v",
        type_names=tuple(type_names),
        concurrency=1,
        inflight=0,
        state=state,
        alive_for=ALIVE,
        release_dead=release_dead,
        prune_after=prune_after,
        now=now,
    )


async def heartbeat(adapter: MemoryStateAdapter, params: WorkerHeartbeat) -> WorkerHeartbeatResult:
    async with adapter.transaction() as tx:
        return await tx.worker_heartbeat(params)


async def running_for(adapter: MemoryStateAdapter, worker_id: str, *, type_name: str = "t") -> Job:
    """A new job of ``type_name`` claimed by ``worker_id`` at T0 (the only pending one of its type)."""
    new = NewJob(id=new_id(), type_name=type_name, chain_type_name=type_name)
    async with adapter.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[new], now=T0))
        params = JobsAcquire(type_names=[type_name], worker_id=worker_id, lease_for=LEASE, now=T0)
        (claimed,) = (await tx.jobs_acquire(params)).jobs
    return claimed


async def get(adapter: MemoryStateAdapter, job_id: str) -> Job:
    async with adapter.transaction(read_only=True) as tx:
        found = await tx.job_get(JobGet(job_id=job_id))
    assert found is not None
    return found


async def registry(adapter: MemoryStateAdapter, *, now: datetime = T0) -> dict[str, WorkerInfo]:
    async with adapter.transaction(read_only=True) as tx:
        return {row.id: row for row in await tx.workers_list(WorkersList(now=now))}


def assert_settled(store: Store) -> None:
    """No lock or preimage outlives its transaction, and the leased-by index matches the rows."""
    assert (store.locks, store.preimages) == ({}, {})
    assert (store.workers.locks, store.workers.preimages) == ({}, {})
    expected: dict[str, set[str]] = {}
    for job in store.jobs.values():
        if job.status is JobStatus.RUNNING and job.leased_by is not None:
            expected.setdefault(job.leased_by, set()).add(job.id)
    assert store.leased == expected


async def rolled_back(adapter: MemoryStateAdapter, body: Body) -> None:
    """Run ``body`` in a write transaction that then raises BoomError (and is rolled back)."""

    async def then_fail() -> None:
        async with adapter.transaction() as tx:
            await body(tx)
            raise BoomError

    with pytest.raises(BoomError):
        await then_fail()


async def dead_worker_with_a_job(adapter: MemoryStateAdapter) -> Job:
    await heartbeat(adapter, beat("dead"))
    return await running_for(adapter, "dead")


# ---------------------------------------------------------------- undo


async def test_rollback_restores_the_registry_the_jobs_and_the_index(adapter: MemoryStateAdapter) -> None:
    job = await dead_worker_with_a_job(adapter)
    await heartbeat(adapter, beat("old", now=T0 - timedelta(hours=2), state=WorkerState.STOPPED))
    before = await registry(adapter, now=DEAD_AT)

    async def body(tx: MemoryStateTx) -> None:
        result = await tx.worker_heartbeat(beat("a", now=DEAD_AT, release_dead=True))
        assert ([j.id for j in result.released_jobs], result.dead_worker_ids) == ([job.id], ["dead"])
        assert sorted(row.id for row in await tx.workers_list(WorkersList(now=DEAD_AT))) == ["a", "dead"]

    await rolled_back(adapter, body)
    assert await registry(adapter, now=DEAD_AT) == before
    assert await get(adapter, job.id) == job
    assert_settled(adapter._store)


async def test_savepoint_rollback_undoes_only_the_heartbeat_inside_it(adapter: MemoryStateAdapter) -> None:
    job = await dead_worker_with_a_job(adapter)
    async with adapter.transaction() as tx:
        await tx.worker_heartbeat(beat("a", now=T0))
        with pytest.raises(BoomError):
            await _in_savepoint_then_fail(tx)
        rows = {row.id: row for row in await tx.workers_list(WorkersList(now=T0))}
        assert sorted(rows) == ["a", "dead"]
        assert rows["a"].last_seen_at == T0
        assert rows["dead"].state is WorkerState.RUNNING
    assert await get(adapter, job.id) == job
    assert_settled(adapter._store)


async def _in_savepoint_then_fail(tx: MemoryStateTx) -> None:
    async with tx.savepoint() as sp:
        await sp.worker_heartbeat(beat("a", now=DEAD_AT, release_dead=True))
        await sp.worker_heartbeat(beat("b", now=DEAD_AT))
        raise BoomError


async def test_a_released_job_undone_by_rollback_can_be_released_again(adapter: MemoryStateAdapter) -> None:
    job = await dead_worker_with_a_job(adapter)

    async def body(tx: MemoryStateTx) -> None:
        await tx.worker_heartbeat(beat("a", now=DEAD_AT, release_dead=True))

    await rolled_back(adapter, body)
    result = await heartbeat(adapter, beat("b", now=DEAD_AT, release_dead=True))
    (released,) = result.released_jobs
    assert (released.id, released.rescued_from) == (job.id, "dead")
    assert_settled(adapter._store)


# ---------------------------------------------------------------- concurrency


async def settle() -> None:
    """Let every runnable task run until it blocks (deterministic: no wall-clock waits)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def test_heartbeats_of_one_worker_wait_for_each_other(adapter: MemoryStateAdapter) -> None:
    async with adapter.transaction() as first:
        await first.worker_heartbeat(beat("a", now=T0))
        second = asyncio.create_task(heartbeat(adapter, beat("a", now=T0 + timedelta(seconds=3))))
        await settle()
        assert not second.done(), "a second heartbeat of the same worker did not wait for the first"
    await asyncio.wait_for(second, 5)
    row = (await registry(adapter))["a"]
    assert (row.started_at, row.last_seen_at) == (T0, T0 + timedelta(seconds=3))
    assert_settled(adapter._store)


async def test_release_skips_a_job_another_transaction_holds(adapter: MemoryStateAdapter) -> None:
    held = await dead_worker_with_a_job(adapter)
    free = await running_for(adapter, "dead", type_name="u")
    async with adapter.transaction() as holder:
        await holder.job_get(JobGet(job_id=held.id, lock=True))
        result = await asyncio.wait_for(heartbeat(adapter, beat("a", now=DEAD_AT, release_dead=True)), 5)
    assert [job.id for job in result.released_jobs] == [free.id]
    assert result.dead_worker_ids == ["dead"]
    assert await get(adapter, held.id) == held  # left to its lease: the reaper's backstop
    assert_settled(adapter._store)


async def test_a_worker_row_another_transaction_holds_is_neither_marked_nor_released(
    adapter: MemoryStateAdapter,
) -> None:
    job = await dead_worker_with_a_job(adapter)
    async with adapter.transaction() as reviving:
        await reviving.worker_heartbeat(beat("dead", now=DEAD_AT))  # the "dead" worker is back, uncommitted
        result = await asyncio.wait_for(heartbeat(adapter, beat("a", now=DEAD_AT, release_dead=True)), 5)
    assert (result.released_jobs, result.dead_worker_ids) == ([], [])
    assert (await get(adapter, job.id)).status is JobStatus.RUNNING
    assert (await registry(adapter, now=DEAD_AT))["dead"].state is WorkerState.RUNNING
    assert_settled(adapter._store)


async def test_prune_skips_a_row_another_transaction_holds(adapter: MemoryStateAdapter) -> None:
    await heartbeat(adapter, beat("old", now=T0 - timedelta(hours=2)))
    async with adapter.transaction() as holder:
        await holder.worker_heartbeat(beat("old", now=T0 - timedelta(hours=2), state=WorkerState.STOPPED))
        await asyncio.wait_for(heartbeat(adapter, beat("a", now=T0)), 5)
    assert sorted(await registry(adapter)) == ["a", "old"]
    await heartbeat(adapter, beat("a", now=T0))
    assert sorted(await registry(adapter)) == ["a"]


async def test_registry_reads_show_committed_rows_beside_an_open_writer(adapter: MemoryStateAdapter) -> None:
    await heartbeat(adapter, beat("a", now=T0))
    async with adapter.transaction() as writer, adapter.transaction() as other:
        await writer.worker_heartbeat(beat("a", now=T0 + timedelta(seconds=1), state=WorkerState.DRAINING))
        await writer.worker_heartbeat(beat("b", now=T0 + timedelta(seconds=1)))
        seen_by_other = await other.workers_list(WorkersList(now=T0))
        seen_by_writer = await writer.workers_list(WorkersList(now=T0))
    assert [(row.id, row.state) for row in seen_by_other] == [("a", WorkerState.RUNNING)]
    assert [(row.id, row.state) for row in seen_by_writer] == [
        ("b", WorkerState.RUNNING),
        ("a", WorkerState.DRAINING),
    ]


async def test_next_lease_expiry_reads_the_committed_lease_of_a_row_another_transaction_changed(
    adapter: MemoryStateAdapter,
) -> None:
    job = await running_for(adapter, "b")
    async with adapter.transaction() as renewing, adapter.transaction() as looking:
        renewal = JobRenewLease(job_id=job.id, worker_id="b", lease_for=timedelta(hours=1), now=T0)
        await renewing.job_renew_lease(renewal)
        result = await looking.worker_heartbeat(beat("a", now=T0 + timedelta(seconds=10)))
    assert result.next_lease_expiry == LEASE - timedelta(seconds=10)


# ---------------------------------------------------------------- semantics


async def test_rescue_texts_name_the_worker() -> None:
    assert rescue_error(RescueReason.LEASE_EXPIRED, "w-1") == (
        "attempt abandoned: the lease held by worker w-1 expired"
    )
    assert rescue_error(RescueReason.WORKER_DEAD, "w-1") == (
        "attempt abandoned: worker w-1 stopped heartbeating and was presumed dead"
    )


async def test_a_heartbeat_needs_a_write_transaction(adapter: MemoryStateAdapter) -> None:
    async with adapter.transaction(read_only=True) as tx:
        with pytest.raises(InvalidArgumentError):
            await tx.worker_heartbeat(beat("a"))


async def test_heartbeat_refuses_to_report_itself_dead() -> None:
    with pytest.raises(InvalidArgumentError):
        beat("a", state=WorkerState.DEAD)


async def test_reap_and_release_keep_the_leased_index_in_step(adapter: MemoryStateAdapter) -> None:
    await dead_worker_with_a_job(adapter)
    await running_for(adapter, "b", type_name="u")
    async with adapter.transaction() as tx:
        await tx.jobs_reap_expired(JobsReapExpired(type_names=["u"], now=T0 + LEASE + timedelta(1), limit=5))
    assert_settled(adapter._store)
    await heartbeat(adapter, beat("a", now=DEAD_AT, release_dead=True))
    assert adapter._store.leased == {}
    assert_settled(adapter._store)


# ---------------------------------------------------------------- random rollbacks


OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["beat", "claim", "release", "stop"]),
        st.sampled_from(["w1", "w2", "w3"]),
        st.integers(0, 20),
        st.booleans(),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS)
async def test_random_work_with_rollbacks_leaves_the_committed_registry_and_indexes(
    operations: list[tuple[str, str, int, bool]],
) -> None:
    adapter = MemoryStateAdapter(clock=lambda: T0)
    now = T0
    for operation, worker_id, step, roll_back in operations:
        now += timedelta(seconds=step)  # the clock never runs backwards
        before = (await registry(adapter, now=now), dict(adapter._store.jobs))
        if roll_back:
            await rolled_back(adapter, partial(_apply, operation=operation, worker_id=worker_id, now=now))
            assert (await registry(adapter, now=now), adapter._store.jobs) == before
        else:
            async with adapter.transaction() as tx:
                await _apply(tx, operation=operation, worker_id=worker_id, now=now)
        assert_settled(adapter._store)
        rows = (await registry(adapter, now=now)).values()
        assert all(row.started_at <= row.last_seen_at < row.alive_until for row in rows)


async def _apply(tx: MemoryStateTx, *, operation: str, worker_id: str, now: datetime) -> None:
    if operation == "claim":
        new = NewJob(id=new_id(), type_name="t", chain_type_name="t")
        await tx.jobs_create(JobsCreate(jobs=[new], now=now))
        await tx.jobs_acquire(JobsAcquire(type_names=["t"], worker_id=worker_id, lease_for=LEASE, now=now))
    else:
        await tx.worker_heartbeat(
            beat(
                worker_id,
                now=now,
                release_dead=operation == "release",
                state=WorkerState.STOPPED if operation == "stop" else WorkerState.RUNNING,
                prune_after=timedelta(seconds=15),
            )
        )
