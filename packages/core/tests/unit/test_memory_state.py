"""The in-process state adapter: the tricky parts of the reference model.

The conformance suite covers the contract broadly; these cases pin the memory model's
own mechanics (undo log, committed view for readers, poison, indexes) and the semantics
the other backends are compared against.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobchain.contracts import (
    BlockedJobsList,
    Capability,
    ChainGet,
    ChainJobsList,
    ChainsDelete,
    ChainsList,
    JobBlockersGet,
    JobComplete,
    JobGet,
    JobNextAvailable,
    JobRenewLease,
    JobReschedule,
    JobsAcquire,
    JobsCreate,
    JobsList,
    JobsReapExpired,
    JobsTrigger,
    NewJob,
)
from jobchain.entities import Chain, Deduplication, Job, JobStatus, Schedule, new_id
from jobchain.errors import (
    AdapterClosedError,
    BlockerReference,
    ChainNotFoundError,
    DuplicateJobIdError,
    InvalidArgumentError,
    InvalidCursorError,
    JobAlreadyCompletedError,
    JobNotFoundError,
    JobTakenByAnotherWorkerError,
    TransientStateError,
)
from jobchain.memory._store import Store, TxState
from jobchain.memory._views import LiveView
from jobchain.memory.state import MemoryStateAdapter, MemoryStateTx

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)


class BoomError(Exception):
    """Raised by a case to roll a transaction or savepoint back."""


Body = Callable[[MemoryStateTx], Awaitable[None]]


async def in_transaction(adapter: MemoryStateAdapter, body: Body) -> None:
    async with adapter.transaction() as tx:
        await body(tx)


async def in_savepoint(tx: MemoryStateTx, body: Body) -> None:
    async with tx.savepoint() as sp:
        await body(sp)


async def rolled_back(adapter: MemoryStateAdapter, body: Body) -> None:
    """Run ``body`` in a write transaction that then raises BoomError (and is rolled back)."""

    async def then_fail(tx: MemoryStateTx) -> None:
        await body(tx)
        raise BoomError

    with pytest.raises(BoomError):
        await in_transaction(adapter, then_fail)


async def savepoint_rolled_back(tx: MemoryStateTx, body: Body) -> None:
    """Run ``body`` in a savepoint that then raises BoomError (and is rolled back)."""

    async def then_fail(sp: MemoryStateTx) -> None:
        await body(sp)
        raise BoomError

    with pytest.raises(BoomError):
        await in_savepoint(tx, then_fail)


def job(
    *,
    type_name: str = "t",
    chain_type_name: str | None = None,
    chain_of: Job | None = None,
    id: str | None = None,
    dedup: Deduplication | None = None,
    schedule: Schedule | None = None,
    blockers: Sequence[str] = (),
) -> NewJob:
    return NewJob(
        id=id or new_id(),
        type_name=type_name,
        chain_type_name=chain_type_name or (chain_of.chain_type_name if chain_of else type_name),
        chain_id=chain_of.chain_id if chain_of else None,
        chain_index=chain_of.chain_index + 1 if chain_of else 0,
        deduplication=dedup,
        schedule=schedule,
        blocker_chain_ids=tuple(blockers),
    )


@pytest.fixture
def adapter() -> MemoryStateAdapter:
    return MemoryStateAdapter(clock=lambda: T0)


async def create(adapter: MemoryStateAdapter, *jobs: NewJob, now: datetime = T0) -> list[Job]:
    async with adapter.transaction() as tx:
        return [created.job for created in await tx.jobs_create(JobsCreate(jobs=jobs, now=now))]


async def create_in(tx: MemoryStateTx, new: NewJob) -> None:
    await tx.jobs_create(JobsCreate(jobs=[new]))


async def get(adapter: MemoryStateAdapter, job_id: str) -> Job | None:
    async with adapter.transaction(read_only=True) as tx:
        return await tx.job_get(JobGet(job_id=job_id))


async def complete(adapter: MemoryStateAdapter, job_id: str, *, now: datetime = T0) -> list[Job]:
    async with adapter.transaction() as tx:
        return (await tx.job_complete(JobComplete(job_id=job_id, now=now))).unblocked_jobs


async def acquire(adapter: MemoryStateAdapter, *types: str, limit: int = 1, now: datetime = T0) -> list[Job]:
    async with adapter.transaction() as tx:
        params = JobsAcquire(type_names=types or ("t",), worker_id="w", lease_for=LEASE, limit=limit, now=now)
        return (await tx.jobs_acquire(params)).jobs


def assert_indexes_consistent(store: Store) -> None:
    """Every index equals the one rebuilt from the rows alone."""
    rebuilt, tx = Store(), TxState()
    for row_id, row in store.jobs.items():
        rebuilt.put(tx, row_id, row, store.blockers.get(row_id, ()))
    rebuilt.finish(tx, commit=True)
    assert list(store.created) == list(rebuilt.created)
    assert list(store.roots) == list(rebuilt.roots)
    assert {k: list(v) for k, v in store.chains.items()} == {k: list(v) for k, v in rebuilt.chains.items()}
    assert store.dependents == rebuilt.dependents
    assert store.dedup == rebuilt.dedup
    for index, fresh in ((store.pending, rebuilt.pending), (store.running, rebuilt.running)):
        assert {k: list(v) for k, v in index.items() if v} == {k: list(v) for k, v in fresh.items() if v}


# ---------------------------------------------------------------- adapter surface


async def test_declares_every_state_capability_and_microsecond_precision(adapter: MemoryStateAdapter) -> None:
    assert adapter.capabilities == frozenset(Capability) - {Capability.WAKE_HINTS}
    assert adapter.time_precision == timedelta(microseconds=1)
    await adapter.migrate()


async def test_closed_adapter_refuses_transactions_and_close_is_idempotent(
    adapter: MemoryStateAdapter,
) -> None:
    await adapter.close()
    await adapter.close()
    assert adapter.closed
    with pytest.raises(AdapterClosedError):
        adapter.transaction()


async def test_joining_a_driver_connection_is_refused(adapter: MemoryStateAdapter) -> None:
    with pytest.raises(InvalidArgumentError):
        adapter.transaction(connection=object())


async def test_naive_now_is_refused(adapter: MemoryStateAdapter) -> None:
    async with adapter.transaction() as tx:
        with pytest.raises(InvalidArgumentError):
            await tx.jobs_create(JobsCreate(jobs=[job()], now=datetime(2030, 1, 1)))


async def test_returned_jobs_are_immutable(adapter: MemoryStateAdapter) -> None:
    (root,) = await create(adapter, job())
    with pytest.raises(AttributeError):
        root.status = JobStatus.RUNNING  # type: ignore[misc]  # proving the dataclass is frozen


# ---------------------------------------------------------------- deduplication


async def test_incomplete_scope_matches_a_chain_whose_root_completed_but_last_job_did_not(
    adapter: MemoryStateAdapter,
) -> None:
    dedup = Deduplication(key="k")
    (root,) = await create(adapter, job(dedup=dedup))
    await create(adapter, job(chain_of=root))
    await complete(adapter, root.id)
    async with adapter.transaction() as tx:
        (again,) = await tx.jobs_create(JobsCreate(jobs=[job(dedup=dedup)], now=T0))
    assert again.deduplicated
    assert again.job.id == root.id


async def test_incomplete_scope_ignores_completed_chains(adapter: MemoryStateAdapter) -> None:
    dedup = Deduplication(key="k")
    (root,) = await create(adapter, job(dedup=dedup))
    await complete(adapter, root.id)
    (fresh,) = await create(adapter, job(dedup=dedup))
    assert fresh.id != root.id


async def test_keys_do_not_cross_chain_types(adapter: MemoryStateAdapter) -> None:
    dedup = Deduplication(key="k")
    (first,) = await create(adapter, job(chain_type_name="a", dedup=dedup))
    (second,) = await create(adapter, job(chain_type_name="b", dedup=dedup))
    assert first.id != second.id


async def test_any_scope_matches_completed_chains_inside_the_window_only(adapter: MemoryStateAdapter) -> None:
    dedup = Deduplication(key="k", scope="any", window=timedelta(minutes=10))
    (root,) = await create(adapter, job(dedup=dedup))
    await complete(adapter, root.id)
    (inside,) = await create(adapter, job(dedup=dedup), now=T0 + timedelta(minutes=10))
    (outside,) = await create(adapter, job(dedup=dedup), now=T0 + timedelta(minutes=10, microseconds=1))
    assert inside.id == root.id
    assert outside.id != root.id


async def test_window_with_incomplete_scope_needs_both_conditions(adapter: MemoryStateAdapter) -> None:
    dedup = Deduplication(key="k", window=timedelta(minutes=1))
    (root,) = await create(adapter, job(dedup=dedup))
    (late,) = await create(adapter, job(dedup=dedup), now=T0 + timedelta(minutes=2))
    assert late.id != root.id


async def test_newest_match_wins_and_excluded_chains_are_skipped(adapter: MemoryStateAdapter) -> None:
    any_scope = Deduplication(key="k", scope="any", window=timedelta(hours=1))
    (older,) = await create(adapter, job(dedup=any_scope))
    (newer,) = await create(adapter, job(), now=T0 + timedelta(seconds=1))  # no key: never matched
    (keyed,) = await create(
        adapter, job(dedup=Deduplication(key="k", scope="any", window=timedelta(seconds=1)))
    )
    assert keyed.id == older.id
    await complete(adapter, older.id)
    (second,) = await create(
        adapter,
        job(dedup=Deduplication(key="k", exclude_chain_ids=[older.id])),
        now=T0 + timedelta(seconds=2),
    )
    assert second.id not in (older.id, newer.id)
    (picked,) = await create(adapter, job(dedup=any_scope), now=T0 + timedelta(seconds=3))
    assert picked.id == second.id


async def test_equal_keys_in_one_batch_collapse_onto_the_first(adapter: MemoryStateAdapter) -> None:
    dedup = Deduplication(key="k")
    other_scope = Deduplication(key="k", scope="any", window=timedelta(seconds=1))
    async with adapter.transaction() as tx:
        results = await tx.jobs_create(
            JobsCreate(jobs=[job(dedup=dedup), job(dedup=other_scope), job(dedup=dedup, chain_type_name="x")])
        )
    assert [r.deduplicated for r in results] == [False, True, False]
    assert results[1].job == results[0].job
    assert results[2].job.id != results[0].job.id


async def test_deduplication_is_checked_before_the_explicit_id(adapter: MemoryStateAdapter) -> None:
    dedup = Deduplication(key="k")
    (root,) = await create(adapter, job(dedup=dedup))
    async with adapter.transaction() as tx:
        (again,) = await tx.jobs_create(JobsCreate(jobs=[job(id=root.id, dedup=dedup)]))
    assert again.deduplicated
    assert again.job == root


async def test_deduplicated_start_creates_no_blockers(adapter: MemoryStateAdapter) -> None:
    (blocker,) = await create(adapter, job(type_name="b"))
    dedup = Deduplication(key="k")
    (root,) = await create(adapter, job(dedup=dedup))
    async with adapter.transaction() as tx:
        (again,) = await tx.jobs_create(JobsCreate(jobs=[job(dedup=dedup, blockers=[blocker.id])]))
        assert await tx.job_blockers_get(JobBlockersGet(job_id=root.id)) == []
    assert again.incomplete_blocker_chain_ids == ()


# ---------------------------------------------------------------- creation errors and blockers


async def test_duplicate_id_writes_nothing_of_the_batch(adapter: MemoryStateAdapter) -> None:
    (existing,) = await create(adapter, job())
    first = job()
    async with adapter.transaction() as tx:
        with pytest.raises(DuplicateJobIdError):
            await tx.jobs_create(JobsCreate(jobs=[first, job(id=existing.id)]))
        assert await tx.job_get(JobGet(job_id=first.id)) is None
    assert await get(adapter, first.id) is None
    assert_indexes_consistent(adapter._store)


async def test_missing_blocker_or_chain_writes_nothing(adapter: MemoryStateAdapter) -> None:
    first = job()
    async with adapter.transaction() as tx:
        with pytest.raises(ChainNotFoundError):
            await tx.jobs_create(JobsCreate(jobs=[first, job(blockers=[new_id()])]))
        orphan = NewJob(id=new_id(), type_name="t", chain_type_name="t", chain_id=new_id(), chain_index=1)
        with pytest.raises(ChainNotFoundError):
            await tx.jobs_create(JobsCreate(jobs=[first, orphan]))
    assert await get(adapter, first.id) is None


async def test_continuation_of_an_existing_index_returns_the_existing_job(
    adapter: MemoryStateAdapter,
) -> None:
    (root,) = await create(adapter, job())
    (step,) = await create(adapter, job(chain_of=root))
    async with adapter.transaction() as tx:
        results = await tx.jobs_create(JobsCreate(jobs=[job(chain_of=root), job(chain_of=root)]))
    assert all(r.deduplicated and r.job == step for r in results)


async def test_blockers_keep_declaration_order_and_may_come_from_the_same_batch(
    adapter: MemoryStateAdapter,
) -> None:
    (done,) = await create(adapter, job(type_name="done"))
    await complete(adapter, done.id)
    fresh = job(type_name="fresh")
    dependent = job(type_name="dep", blockers=[fresh.id, done.id])
    async with adapter.transaction() as tx:
        results = await tx.jobs_create(JobsCreate(jobs=[fresh, dependent]))
        blockers = await tx.job_blockers_get(JobBlockersGet(job_id=dependent.id))
    assert results[1].job.status is JobStatus.BLOCKED
    assert results[1].incomplete_blocker_chain_ids == (fresh.id,)
    assert [chain.id for chain in blockers] == [fresh.id, done.id]


async def test_job_is_unblocked_only_when_every_blocker_chain_completes(adapter: MemoryStateAdapter) -> None:
    (a,) = await create(adapter, job(type_name="a"))
    (b,) = await create(adapter, job(type_name="b"))
    later = T0 + timedelta(hours=1)
    (dep,) = await create(adapter, job(type_name="dep", blockers=[a.id, b.id], schedule=Schedule(at=later)))
    (a_next,) = await create(adapter, job(chain_of=a))
    assert await complete(adapter, a.id) == []  # a continued: its chain is not complete
    assert await complete(adapter, b.id) == []
    unblocked = await complete(adapter, a_next.id, now=T0 + timedelta(minutes=1))
    assert [j.id for j in unblocked] == [dep.id]
    assert unblocked[0].status is JobStatus.PENDING
    assert unblocked[0].scheduled_at == later  # a future schedule is kept


async def test_unblocking_raises_a_stale_schedule_to_now(adapter: MemoryStateAdapter) -> None:
    (a,) = await create(adapter, job(type_name="a"))
    (dep,) = await create(adapter, job(type_name="dep", blockers=[a.id]))
    moment = T0 + timedelta(minutes=5)
    (unblocked,) = await complete(adapter, a.id, now=moment)
    assert (unblocked.id, unblocked.scheduled_at) == (dep.id, moment)


# ---------------------------------------------------------------- worker transitions


async def test_acquire_orders_by_schedule_then_creation_then_id_across_types(
    adapter: MemoryStateAdapter,
) -> None:
    ids = sorted(new_id() for _ in range(3))
    await create(adapter, job(id=ids[2], type_name="x"), job(id=ids[0], type_name="y"))
    (early,) = await create(
        adapter, job(id=ids[1], type_name="x", schedule=Schedule(at=T0)), now=T0 - timedelta(1)
    )
    (future,) = await create(adapter, job(type_name="y", schedule=Schedule(after=timedelta(seconds=5))))
    claimed = await acquire(adapter, "x", "y", limit=10)
    assert [j.id for j in claimed] == [early.id, ids[0], ids[2]]
    assert all(j.status is JobStatus.RUNNING and j.attempt == 1 and j.lease_generation == 1 for j in claimed)
    assert claimed[0].leased_until == T0 + LEASE
    async with adapter.transaction(read_only=True) as tx:
        wait = await tx.job_next_available(JobNextAvailable(type_names=["x", "y"], now=T0))
    assert wait == timedelta(seconds=5)
    assert future.status is JobStatus.PENDING


async def test_acquire_reports_has_more(adapter: MemoryStateAdapter) -> None:
    await create(adapter, job(), job())
    async with adapter.transaction() as tx:
        first = await tx.jobs_acquire(JobsAcquire(type_names=["t"], worker_id="w", lease_for=LEASE))
        second = await tx.jobs_acquire(JobsAcquire(type_names=["t"], worker_id="w", lease_for=LEASE))
    assert (len(first.jobs), first.has_more) == (1, True)
    assert (len(second.jobs), second.has_more) == (1, False)


async def test_ownership_errors_change_nothing(adapter: MemoryStateAdapter) -> None:
    (root,) = await create(adapter, job())
    (running,) = await acquire(adapter)
    attempts: list[JobRenewLease | JobComplete | JobReschedule] = [
        JobRenewLease(job_id=root.id, worker_id="other", lease_for=LEASE),
        JobRenewLease(job_id=root.id, worker_id="w", lease_for=LEASE, lease_generation=0),
        JobComplete(job_id=root.id, worker_id="other"),
        JobReschedule(job_id=root.id, schedule=Schedule(after=timedelta(0)), error="e", worker_id="other"),
    ]

    async def attempt(tx: MemoryStateTx, params: JobRenewLease | JobComplete | JobReschedule) -> None:
        if isinstance(params, JobRenewLease):
            await tx.job_renew_lease(params)
        elif isinstance(params, JobComplete):
            await tx.job_complete(params)
        else:
            await tx.job_reschedule(params)

    async with adapter.transaction() as tx:
        for params in attempts:
            with pytest.raises(JobTakenByAnotherWorkerError) as info:
                await attempt(tx, params)
            assert info.value.leased_by == "w"
        with pytest.raises(JobNotFoundError):
            await tx.job_complete(JobComplete(job_id=new_id(), worker_id="w"))
    assert await get(adapter, root.id) == running


async def test_expired_unreaped_lease_is_renewable_and_reaping_is_strict(adapter: MemoryStateAdapter) -> None:
    (root,) = await create(adapter, job())
    (running,) = await acquire(adapter)
    expiry = T0 + LEASE
    async with adapter.transaction() as tx:
        assert await tx.jobs_reap_expired(JobsReapExpired(type_names=["t"], now=expiry)) == []
        renewed = await tx.job_renew_lease(
            JobRenewLease(job_id=root.id, worker_id="w", lease_for=LEASE, now=expiry)
        )
    assert renewed.leased_until == expiry + LEASE
    async with adapter.transaction() as tx:
        skipped = await tx.jobs_reap_expired(
            JobsReapExpired(type_names=["t"], exclude_job_ids=[root.id], now=expiry + LEASE * 2)
        )
        (reaped,) = await tx.jobs_reap_expired(JobsReapExpired(type_names=["t"], now=expiry + LEASE * 2))
    assert skipped == []
    assert (reaped.status, reaped.leased_by, reaped.leased_until) == (JobStatus.PENDING, None, None)
    assert reaped.lease_generation == running.lease_generation
    async with adapter.transaction() as tx:
        with pytest.raises(JobTakenByAnotherWorkerError):
            await tx.job_complete(JobComplete(job_id=root.id, worker_id="w"))


async def test_workerless_completion_reports_the_previous_lease(adapter: MemoryStateAdapter) -> None:
    (root,) = await create(adapter, job())
    await acquire(adapter)
    async with adapter.transaction() as tx:
        result = await tx.job_complete(JobComplete(job_id=root.id, output={"ok": True}))
        with pytest.raises(JobAlreadyCompletedError):
            await tx.job_complete(JobComplete(job_id=root.id))
    assert (result.was_running, result.previous_leased_by, result.chain_completed) == (True, "w", True)
    assert (result.job.completed_by, result.job.leased_by, result.job.output) == (None, None, {"ok": True})


async def test_trigger_is_all_or_nothing(adapter: MemoryStateAdapter) -> None:
    later = Schedule(after=timedelta(hours=1))
    a, b = await create(adapter, job(schedule=later), job(schedule=later))
    await complete(adapter, b.id)
    missing = new_id()
    async with adapter.transaction() as tx:
        refused = await tx.jobs_trigger(JobsTrigger(job_ids=[a.id, missing, b.id]))
        assert (await tx.job_get(JobGet(job_id=a.id))) == a
        empty = await tx.jobs_trigger(JobsTrigger(job_ids=[]))
        done = await tx.jobs_trigger(JobsTrigger(job_ids=[a.id]))
    assert refused.triggered == []
    assert refused.not_found == [missing]
    assert refused.not_triggerable == [(b.id, "completed")]
    assert (empty.triggered, empty.not_found, empty.not_triggerable) == ([], [], [])
    assert [j.scheduled_at for j in done.triggered] == [T0]


# ---------------------------------------------------------------- deletion


async def test_delete_refuses_outside_references_and_cascade_follows_blockers(
    adapter: MemoryStateAdapter,
) -> None:
    (leaf,) = await create(adapter, job(type_name="leaf"))
    (left,) = await create(adapter, job(type_name="left", blockers=[leaf.id]))
    (right,) = await create(adapter, job(type_name="right", blockers=[leaf.id]))
    (top,) = await create(adapter, job(type_name="top"))
    (top_next,) = await create(adapter, job(chain_of=top, blockers=[left.id, right.id]))
    async with adapter.transaction() as tx:
        refused = await tx.chains_delete(ChainsDelete(chain_ids=[leaf.id]))
        assert refused.chains == []
        assert sorted(refused.blocker_references, key=lambda r: r.referenced_by_job_id) == sorted(
            [BlockerReference(leaf.id, left.id), BlockerReference(leaf.id, right.id)],
            key=lambda r: r.referenced_by_job_id,
        )
        (running,) = (
            await tx.jobs_acquire(JobsAcquire(type_names=["leaf"], worker_id="w", lease_for=LEASE))
        ).jobs
        deleted = await tx.chains_delete(ChainsDelete(chain_ids=[top.id, new_id()], cascade=True))
    # The requested chains first, then the cascaded ones by root creation (created_at, id).
    cascaded = sorted([leaf, left, right], key=lambda j: (j.created_at, j.id))
    assert [c.id for c in deleted.chains] == [top.id, *(j.id for j in cascaded)]
    assert deleted.chains[0].last == top_next
    assert deleted.running_job_ids == [running.id]
    assert adapter._store.jobs == {}
    assert_indexes_consistent(adapter._store)


# ---------------------------------------------------------------- transactions


async def test_read_only_transaction_sees_only_committed_state_while_a_writer_is_open(
    adapter: MemoryStateAdapter,
) -> None:
    (blocker,) = await create(adapter, job(type_name="b"))
    (kept,) = await create(adapter, job(blockers=[blocker.id]))
    (doomed,) = await create(adapter, job(type_name="gone"))
    before = await snapshot(adapter, blocker.id)
    async with adapter.transaction() as writer:
        await writer.jobs_create(JobsCreate(jobs=[job(), job(chain_of=blocker)]))
        await writer.jobs_acquire(JobsAcquire(type_names=["b"], worker_id="w", lease_for=LEASE))
        await writer.chains_delete(ChainsDelete(chain_ids=[doomed.id]))
        await writer.jobs_create(
            JobsCreate(jobs=[job(id=doomed.id, type_name="again", blockers=[blocker.id])])
        )
        during = await asyncio.wait_for(snapshot(adapter, blocker.id), 1)  # never waits for the writer
        assert await writer.job_get(JobGet(job_id=doomed.id)) != await get(adapter, doomed.id)
    assert during == before
    assert kept.status is JobStatus.BLOCKED
    assert await snapshot(adapter, blocker.id) != before


async def snapshot(adapter: MemoryStateAdapter, blocker_id: str) -> tuple[object, ...]:
    async with adapter.transaction(read_only=True) as tx:
        return (
            await tx.jobs_list(JobsList()),
            await tx.jobs_list(JobsList(order="asc", limit=2)),
            await tx.chains_list(ChainsList(root_only=True)),
            await tx.chain_get(ChainGet(chain_id=blocker_id)),
            await tx.chain_jobs_list(ChainJobsList(chain_id=blocker_id)),
            await tx.blocked_jobs_list(BlockedJobsList(blocker_chain_id=blocker_id)),
            await tx.job_next_available(JobNextAvailable(type_names=["t", "b", "gone", "again"], now=T0)),
        )


async def test_read_only_transaction_refuses_writes_and_locks(adapter: MemoryStateAdapter) -> None:
    async with adapter.transaction(read_only=True) as tx:
        with pytest.raises(InvalidArgumentError):
            await tx.jobs_create(JobsCreate(jobs=[job()]))
        with pytest.raises(InvalidArgumentError):
            await tx.job_get(JobGet(job_id=new_id(), lock=True))
        assert await tx.chain_get(ChainGet(chain_id=new_id())) is None


async def settle() -> None:
    """Let every runnable task run until it blocks (deterministic: no wall-clock waits)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def test_open_write_transactions_do_not_see_each_others_changes(adapter: MemoryStateAdapter) -> None:
    existing, locked, free = await create(adapter, job(), job(), job(), now=T0)
    inserted = job()
    async with adapter.transaction() as first, adapter.transaction() as second:
        await first.jobs_create(JobsCreate(jobs=[inserted], now=T0 - timedelta(1)))
        await first.job_get(JobGet(job_id=locked.id, lock=True))
        await first.job_complete(JobComplete(job_id=existing.id))
        assert await second.job_get(JobGet(job_id=inserted.id)) is None
        assert await second.job_get(JobGet(job_id=existing.id)) == existing
        assert len((await second.jobs_list(JobsList())).items) == 3
        # The inserted and the locked pending rows are skipped, not waited for.
        params = JobsAcquire(type_names=["t"], worker_id="w2", lease_for=LEASE, limit=5, now=T0)
        claimed = await asyncio.wait_for(second.jobs_acquire(params), 5)
        assert [j.id for j in claimed.jobs] == [free.id]
    assert (await get(adapter, existing.id) or existing).status is JobStatus.COMPLETED


async def test_locked_row_makes_a_writer_wait_and_then_see_the_commit(adapter: MemoryStateAdapter) -> None:
    (root,) = await create(adapter, job())
    async with adapter.transaction() as holder:
        await holder.job_get(JobGet(job_id=root.id, lock=True))
        waiter = asyncio.create_task(complete(adapter, root.id))
        await settle()
        assert not waiter.done()
        await holder.job_complete(JobComplete(job_id=root.id, output="first", now=T0))
    with pytest.raises(JobAlreadyCompletedError):
        await waiter
    assert (await get(adapter, root.id) or root).output == "first"


async def test_lock_wait_cycle_fails_the_second_waiter_as_a_deadlock(adapter: MemoryStateAdapter) -> None:
    a, b = await create(adapter, job(), job())
    b_locked = asyncio.Event()

    async def first() -> None:
        async with adapter.transaction() as tx:
            await tx.job_get(JobGet(job_id=a.id, lock=True))
            await b_locked.wait()
            await tx.job_get(JobGet(job_id=b.id, lock=True))  # waits for second, which then fails

    async def second(tx: MemoryStateTx) -> None:
        await tx.job_get(JobGet(job_id=b.id, lock=True))
        b_locked.set()
        await settle()  # first is now waiting for b
        with pytest.raises(TransientStateError, match="deadlock"):
            await tx.job_get(JobGet(job_id=a.id, lock=True))
        assert tx.poisoned

    task = asyncio.create_task(first())
    with pytest.raises(TransientStateError, match="poisoned"):
        await in_transaction(adapter, second)
    await asyncio.wait_for(task, 5)


async def test_dependent_created_while_its_blocker_completes_is_not_stranded(
    adapter: MemoryStateAdapter,
) -> None:
    (blocker,) = await create(adapter, job(type_name="b"))
    dependent = job(blockers=[blocker.id])
    async with adapter.transaction() as completing:
        await completing.job_complete(JobComplete(job_id=blocker.id, now=T0))
        creating = asyncio.create_task(create(adapter, dependent))
        await settle()
        assert not creating.done()  # waits for the blocker's last job
    (created,) = await creating
    assert created.status is JobStatus.PENDING


async def test_blockers_completed_by_concurrent_transactions_unblock_their_dependent(
    adapter: MemoryStateAdapter,
) -> None:
    (first, second) = await create(adapter, job(type_name="b1"), job(type_name="b2"))
    (dependent,) = await create(adapter, job(blockers=[first.id, second.id]))
    async with adapter.transaction() as tx:
        assert (await tx.job_complete(JobComplete(job_id=first.id))).unblocked_jobs == []
        other = asyncio.create_task(complete(adapter, second.id))
        await settle()
        assert not other.done()  # waits for the dependent's lock before deciding
    assert [j.id for j in await other] == [dependent.id]


async def test_concurrent_starts_with_one_key_create_one_chain(adapter: MemoryStateAdapter) -> None:
    dedup = Deduplication(key="k")
    async with adapter.transaction() as tx:
        (first,) = await tx.jobs_create(JobsCreate(jobs=[job(dedup=dedup)]))
        later = asyncio.create_task(create(adapter, job(dedup=dedup)))
        await settle()
        assert not later.done()
    (second,) = await later
    assert second.id == first.job.id


async def test_deduplication_reads_the_committed_chain_another_transaction_is_deleting(
    adapter: MemoryStateAdapter,
) -> None:
    dedup = Deduplication(key="k")
    (root,) = await create(adapter, job(dedup=dedup))
    async with adapter.transaction() as deleting, adapter.transaction() as starting:
        await deleting.chains_delete(ChainsDelete(chain_ids=[root.id]))
        (again,) = await starting.jobs_create(JobsCreate(jobs=[job(dedup=dedup)]))
        assert (again.deduplicated, again.job.id) == (True, root.id)
        assert await starting.chain_get(ChainGet(chain_id=root.id)) == Chain(root, root)


async def test_id_inserted_by_a_rolled_back_transaction_is_free_again(adapter: MemoryStateAdapter) -> None:
    contested = job()
    others: list[asyncio.Task[list[Job]]] = []

    async def insert_then_wait(tx: MemoryStateTx) -> None:
        await create_in(tx, contested)
        others.append(asyncio.create_task(create(adapter, contested)))
        await settle()
        assert not others[0].done()  # the id is taken by an open transaction: wait for its outcome

    await rolled_back(adapter, insert_then_wait)
    assert [j.id for j in await others[0]] == [contested.id]


async def test_savepoint_rollback_releases_the_locks_taken_inside_it(adapter: MemoryStateAdapter) -> None:
    (root,) = await create(adapter, job())

    async def lock_root(sp: MemoryStateTx) -> None:
        await sp.job_get(JobGet(job_id=root.id, lock=True))

    async with adapter.transaction() as tx:
        await savepoint_rolled_back(tx, lock_root)
        async with adapter.transaction() as other:
            # Would wait forever (same task) if the savepoint had kept the lock.
            assert await asyncio.wait_for(other.job_get(JobGet(job_id=root.id, lock=True)), 5) == root


async def test_rollback_restores_rows_and_every_index(adapter: MemoryStateAdapter) -> None:
    (a,) = await create(adapter, job(dedup=Deduplication(key="k")))
    (b,) = await create(adapter, job(type_name="b", blockers=[a.id]))
    await acquire(adapter)
    rows_before = dict(adapter._store.jobs)

    async def mutate(tx: MemoryStateTx) -> None:
        await tx.job_complete(JobComplete(job_id=a.id, worker_id="w"))
        await tx.jobs_create(JobsCreate(jobs=[job(), job(dedup=Deduplication(key="k2"))]))
        await tx.jobs_acquire(JobsAcquire(type_names=["b", "t"], worker_id="w", lease_for=LEASE, limit=5))
        await tx.chains_delete(ChainsDelete(chain_ids=[b.id]))

    await rolled_back(adapter, mutate)
    assert adapter._store.jobs == rows_before
    store = adapter._store
    assert (store.preimages, store.locks) == ({}, {})
    assert (store.preimages_by_chain, store.preimages_by_blocker, store.preimages_by_dedup) == ({}, {}, {})
    assert_indexes_consistent(adapter._store)


async def test_savepoint_rollback_keeps_the_outer_changes(adapter: MemoryStateAdapter) -> None:
    outer, inner = job(), job()
    async with adapter.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[outer]))
        await savepoint_rolled_back(tx, lambda sp: create_in(sp, inner))
    assert await get(adapter, outer.id) is not None
    assert await get(adapter, inner.id) is None


async def test_poison_lasts_until_a_savepoint_open_at_the_time_rolls_back(
    adapter: MemoryStateAdapter,
) -> None:
    kept = job()

    async def poison_then_fail(sp: MemoryStateTx) -> None:
        sp.poison()
        with pytest.raises(TransientStateError, match="poisoned"):
            await sp.job_get(JobGet(job_id=kept.id))
        raise TransientStateError("the statement failed")

    async def outer(sp: MemoryStateTx) -> None:
        await sp.jobs_create(JobsCreate(jobs=[job()]))
        with pytest.raises(TransientStateError, match="statement failed"):
            await in_savepoint(sp, poison_then_fail)
        # The inner savepoint rolled back: the poison is gone.
        assert await sp.job_get(JobGet(job_id=kept.id)) is None

    async with adapter.transaction() as tx:
        await savepoint_rolled_back(tx, outer)
        await tx.jobs_create(JobsCreate(jobs=[kept]))
    assert await get(adapter, kept.id) is not None
    assert len(adapter._store.jobs) == 1


async def test_releasing_a_savepoint_of_a_poisoned_transaction_fails(adapter: MemoryStateAdapter) -> None:
    inner = job()

    async def create_then_poison(sp: MemoryStateTx) -> None:
        await create_in(sp, inner)
        sp.poison()

    async with adapter.transaction() as tx:
        with pytest.raises(TransientStateError):
            await in_savepoint(tx, create_then_poison)
        assert await tx.job_get(JobGet(job_id=inner.id)) is None


async def test_poisoned_transaction_rolls_back_at_commit(adapter: MemoryStateAdapter) -> None:
    created = job()

    async def create_then_poison(tx: MemoryStateTx) -> None:
        await create_in(tx, created)
        tx.poison()
        with pytest.raises(TransientStateError):
            await in_savepoint(tx, lambda _: asyncio.sleep(0))

    with pytest.raises(TransientStateError, match="rolled back"):
        await in_transaction(adapter, create_then_poison)
    assert await get(adapter, created.id) is None


async def test_ended_transaction_refuses_operations(adapter: MemoryStateAdapter) -> None:
    async with adapter.transaction() as tx:
        pass
    with pytest.raises(InvalidArgumentError):
        await tx.job_get(JobGet(job_id=new_id()))


# ---------------------------------------------------------------- listings and cursors


async def test_cursor_pages_walk_ties_by_id_in_both_orders(adapter: MemoryStateAdapter) -> None:
    created = await create(adapter, *(job() for _ in range(5)))
    expected = sorted(j.id for j in created)
    for order, want in (("asc", expected), ("desc", expected[::-1])):
        seen: list[str] = []
        cursor: str | None = None
        while True:
            async with adapter.transaction(read_only=True) as tx:
                page = await tx.jobs_list(JobsList(order=order, limit=2, cursor=cursor))  # type: ignore[arg-type]
            seen.extend(j.id for j in page.items)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == want


async def test_cursor_is_stable_under_concurrent_inserts(adapter: MemoryStateAdapter) -> None:
    first = await create(adapter, job(), now=T0)
    second = await create(adapter, job(), now=T0 + timedelta(seconds=1))
    async with adapter.transaction(read_only=True) as tx:
        page = await tx.chains_list(ChainsList(limit=1))
    assert [c.id for c in page.items] == [second[0].id]
    await create(adapter, job(), now=T0 + timedelta(seconds=2))
    async with adapter.transaction(read_only=True) as tx:
        page = await tx.chains_list(ChainsList(limit=1, cursor=page.next_cursor))
    assert [c.id for c in page.items] == [first[0].id]
    assert page.next_cursor is None


async def test_cursor_of_another_query_is_refused(adapter: MemoryStateAdapter) -> None:
    await create(adapter, job(), job())
    async with adapter.transaction(read_only=True) as tx:
        page = await tx.jobs_list(JobsList(limit=1))
        assert page.next_cursor is not None
        with pytest.raises(InvalidCursorError):
            await tx.jobs_list(JobsList(limit=1, order="asc", cursor=page.next_cursor))
        with pytest.raises(InvalidCursorError):
            await tx.jobs_list(JobsList(limit=1, cursor="not-a-cursor"))


async def test_chain_listing_filters(adapter: MemoryStateAdapter) -> None:
    (blocker,) = await create(adapter, job(type_name="b"), now=T0)
    (root,) = await create(adapter, job(type_name="a", blockers=[blocker.id]), now=T0 + timedelta(seconds=1))
    (step,) = await create(adapter, job(chain_of=root), now=T0 + timedelta(seconds=2))

    async def listed(**filters: object) -> list[str]:
        async with adapter.transaction(read_only=True) as tx:
            page = await tx.chains_list(ChainsList(**filters))  # type: ignore[arg-type]
        return [chain.id for chain in page.items]

    assert await listed() == [root.id, blocker.id]
    assert await listed(root_only=True) == [root.id]
    assert await listed(job_ids=[step.id]) == [root.id]
    assert await listed(chain_ids=[step.id]) == []
    assert await listed(statuses=["blocked"]) == []  # the root is blocked, but the last job decides
    assert await listed(statuses=["pending"], order="asc") == [blocker.id, root.id]
    assert await listed(type_names=["b"]) == [blocker.id]
    assert await listed(created_from=T0, created_to=T0) == [blocker.id]


async def test_chain_jobs_pages_by_index(adapter: MemoryStateAdapter) -> None:
    (root,) = await create(adapter, job())
    (step,) = await create(adapter, job(chain_of=root))
    (last,) = await create(adapter, job(chain_of=step))
    async with adapter.transaction(read_only=True) as tx:
        page = await tx.chain_jobs_list(ChainJobsList(chain_id=root.id, order="desc", limit=2))
        rest = await tx.chain_jobs_list(
            ChainJobsList(chain_id=root.id, order="desc", limit=2, cursor=page.next_cursor)
        )
    assert [j.id for j in page.items] == [last.id, step.id]
    assert [j.id for j in rest.items] == [root.id]


# ---------------------------------------------------------------- model property


OPS = st.lists(
    st.tuples(
        st.sampled_from(["create", "continue", "block", "acquire", "complete", "reap", "delete"]),
        st.integers(0, 9),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(committed=OPS, rolled_back_ops=OPS)
async def test_random_rollback_restores_state_and_readers_see_committed_data(
    committed: list[tuple[str, int]], rolled_back_ops: list[tuple[str, int]]
) -> None:
    adapter = MemoryStateAdapter(clock=lambda: T0)
    async with adapter.transaction() as tx:
        await apply_ops(tx, committed)
    assert_indexes_consistent(adapter._store)
    rows = dict(adapter._store.jobs)
    view_before = await snapshot_all(adapter)

    async def mutate(tx: MemoryStateTx) -> None:
        await apply_ops(tx, rolled_back_ops)
        assert_indexes_consistent(adapter._store)
        assert await snapshot_all(adapter) == view_before

    await rolled_back(adapter, mutate)
    assert adapter._store.jobs == rows
    assert adapter._store.preimages_by_chain == {}
    assert_indexes_consistent(adapter._store)


def adapter_of(tx: MemoryStateTx) -> MemoryStateAdapter:
    return tx._adapter


async def apply_ops(tx: MemoryStateTx, ops: list[tuple[str, int]]) -> None:
    for name, pick in ops:
        jobs = sorted(
            LiveView(adapter_of(tx)._store).walk(roots=False, descending=False, after=None),
            key=lambda j: j.id,
        )
        target = jobs[pick % len(jobs)] if jobs else None
        now = T0 + timedelta(seconds=pick)
        try:
            if name == "create" or target is None:
                await tx.jobs_create(JobsCreate(jobs=[job(dedup=Deduplication(key=str(pick % 3)))], now=now))
            elif name == "continue":
                await tx.jobs_create(JobsCreate(jobs=[job(chain_of=target)], now=now))
            elif name == "block":
                await tx.jobs_create(JobsCreate(jobs=[job(blockers=[target.chain_id])], now=now))
            elif name == "acquire":
                await tx.jobs_acquire(
                    JobsAcquire(type_names=["t"], worker_id="w", lease_for=LEASE, limit=2, now=now)
                )
            elif name == "complete":
                await tx.job_complete(JobComplete(job_id=target.id, now=now))
            elif name == "reap":
                await tx.jobs_reap_expired(JobsReapExpired(type_names=["t"], now=now + LEASE * 2))
            else:
                await tx.chains_delete(ChainsDelete(chain_ids=[target.chain_id], cascade=pick % 2 == 0))
        except (JobAlreadyCompletedError, JobNotFoundError):
            pass


async def snapshot_all(adapter: MemoryStateAdapter, *, read_only: bool = True) -> tuple[object, ...]:
    """Everything a transaction that changes nothing itself can read."""
    async with adapter.transaction(read_only=read_only) as tx:
        jobs = (await tx.jobs_list(JobsList(limit=500))).items
        return (
            jobs,
            await tx.chains_list(ChainsList(limit=500)),
            [await tx.chain_get(ChainGet(chain_id=j.chain_id)) for j in jobs],
            [await tx.blocked_jobs_list(BlockedJobsList(blocker_chain_id=j.chain_id)) for j in jobs],
            [await tx.job_blockers_get(JobBlockersGet(job_id=j.id)) for j in jobs],
            await tx.job_next_available(JobNextAvailable(type_names=["t"], now=T0)),
        )
