"""Points where backends used to disagree: result orders, refused arguments, ended transactions.

Each case pins one rule of docs/adapters/state-semantics.md that no other case checked, so a
backend that returns the right rows in another order, or accepts what the others refuse,
fails here. Times and ids are arranged so that the specified order differs from insertion
order, from id order and from the other orders a backend is likely to fall into.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import pytest

from jobchain.contracts import (
    ChainGet,
    ChainsDelete,
    CompletesJobsInBatches,
    JobComplete,
    JobGet,
    JobsCreate,
    JobsReapExpired,
    StateAdapter,
)
from jobchain.entities import Job, JobStatus, Schedule, new_id
from jobchain.errors import InvalidArgumentError, InvalidJobIdError
from jobchain_conformance.helpers import (
    acquire,
    complete,
    create,
    find_job,
    ids,
    new_job,
    reap,
    renew,
    start,
)

SECOND = timedelta(seconds=1)


def descending_ids(count: int) -> list[str]:
    """Fresh canonical ids, highest first: assigned in creation order, id order is the reverse."""
    return sorted((new_id() for _ in range(count)), reverse=True)


def by_created(jobs: Sequence[Job]) -> list[str]:
    return [job.id for job in sorted(jobs, key=lambda job: (job.created_at, job.id))]


class ResultOrderTests:
    """Every result list comes back in the order §6 of the state semantics specifies."""

    async def test_claimed_jobs_come_in_scheduled_then_created_then_id_order(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first_id, tie_high, tie_low = descending_ids(3)
        tie_low, tie_high = min(tie_low, tie_high), max(tie_low, tie_high)
        # Created first but due last; then two due at the same instant, created together (id tie-break).
        late = await start(state_adapter, now=now, id=first_id, schedule=Schedule(at=now + 5 * SECOND))
        await create(state_adapter, [new_job(id=tie_high), new_job(id=tie_low)], now=now + SECOND)
        acquired = await acquire(state_adapter, now=now + 10 * SECOND, limit=5)
        assert ids(acquired.jobs) == [tie_low, tie_high, late.id]

    async def test_reaped_jobs_come_oldest_lease_first(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        older_id, newer_id = descending_ids(2)
        older = await start(state_adapter, now=now, id=older_id)
        newer = await start(state_adapter, now=now + SECOND, id=newer_id)
        claimed = await acquire(state_adapter, now=now + 2 * SECOND, limit=2)
        assert ids(claimed.jobs) == [older.id, newer.id]
        # The older job's lease is renewed later, so it now expires after the newer one's.
        await renew(state_adapter, older.id, now=now + timedelta(minutes=1))
        reaped = await reap(state_adapter, now=now + timedelta(hours=1), limit=5)
        assert ids(reaped) == [newer.id, older.id], "reaped jobs must come oldest lease first"
        assert all(job.status is JobStatus.PENDING and job.leased_until is None for job in reaped)

    async def test_released_dependents_come_in_created_order(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        late_id, early_id = sorted([new_id(), new_id()])  # the later-created one has the lower id
        # Inserted late first, early second: insertion order and id order both disagree.
        late = await start(state_adapter, now=now + 5 * SECOND, id=late_id, blocker_chain_ids=[blocker.id])
        early = await start(state_adapter, now=now + SECOND, id=early_id, blocker_chain_ids=[blocker.id])
        assert (late.status, early.status) == (JobStatus.BLOCKED, JobStatus.BLOCKED)
        completed = await complete(state_adapter, blocker.id, now=now + 10 * SECOND)
        assert ids(completed.unblocked_jobs) == [early.id, late.id]

    async def test_batch_completion_results_come_in_input_order(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = await start(state_adapter, now=now)
        second = await start(state_adapter, now=now + SECOND)
        async with state_adapter.transaction() as tx:
            if not isinstance(tx, CompletesJobsInBatches):
                pytest.skip("the adapter does not complete jobs in batches")
            results = await tx.jobs_complete(
                [JobComplete(job_id=second.id, now=now), JobComplete(job_id=first.id, now=now)]
            )
        assert [getattr(result, "job", result) for result in results] == [
            await find_job(state_adapter, second.id),
            await find_job(state_adapter, first.id),
        ]

    async def test_deleted_chains_come_requested_first_then_cascaded_by_creation(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        x_id, y_id, d1_id, d2_id = descending_ids(4)
        x = await start(state_adapter, now=now + SECOND, id=x_id, type_name="x")
        y = await start(state_adapter, now=now + 2 * SECOND, id=y_id, type_name="y")
        # D1 declares Y before X: discovery order is Y, X; creation order is X, Y.
        d1 = await start(state_adapter, now=now + 3 * SECOND, id=d1_id, blocker_chain_ids=[y.id, x.id])
        d2 = await start(state_adapter, now=now + 4 * SECOND, id=d2_id, type_name="d2")
        running = await acquire(state_adapter, now=now + 5 * SECOND, type_names=["d2", "y", "x"], limit=5)
        assert set(ids(running.jobs)) == {x.id, y.id, d2.id}
        async with state_adapter.transaction() as tx:
            deleted = await tx.chains_delete(ChainsDelete(chain_ids=[d2.id, d1.id], cascade=True))
        assert [chain.id for chain in deleted.chains] == [d2.id, d1.id, x.id, y.id]
        assert deleted.running_job_ids == [x.id, y.id, d2.id], (
            "running_job_ids come in (created_at, id) order"
        )

    async def test_blocker_references_come_by_referencing_job_then_chain(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        a = await start(state_adapter, now=now)
        b = await start(state_adapter, now=now)
        low, high = sorted([a.id, b.id])
        r_late_id, r_early_id, r_both_id = sorted([new_id(), new_id(), new_id()])
        r_late = await start(state_adapter, now=now + 6 * SECOND, id=r_late_id, blocker_chain_ids=[a.id])
        r_early = await start(state_adapter, now=now + 5 * SECOND, id=r_early_id, blocker_chain_ids=[b.id])
        r_both = await start(state_adapter, now=now + 7 * SECOND, id=r_both_id, blocker_chain_ids=[high, low])
        async with state_adapter.transaction() as tx:
            refused = await tx.chains_delete(ChainsDelete(chain_ids=[a.id, b.id]))
        assert refused.chains == []
        assert [(ref.referenced_by_job_id, ref.chain_id) for ref in refused.blocker_references] == [
            (r_early.id, b.id),
            (r_late.id, a.id),
            (r_both.id, low),
            (r_both.id, high),
        ]


class RefusedArgumentTests:
    """Arguments every backend refuses the same way, writing nothing."""

    @pytest.mark.parametrize("limit", [0, -1])
    def test_reap_params_refuse_a_limit_below_one(self, limit: int) -> None:
        with pytest.raises(InvalidArgumentError):
            JobsReapExpired(type_names=["t"], limit=limit)

    @pytest.mark.parametrize("lock_chain", [False, True], ids=["job_get", "chain_get"])
    async def test_a_locked_read_in_a_read_only_transaction_is_refused(
        self, state_adapter: StateAdapter, now: datetime, lock_chain: bool
    ) -> None:
        job = await start(state_adapter, now=now)
        async with state_adapter.transaction(read_only=True) as tx:
            read = (
                tx.chain_get(ChainGet(chain_id=job.id, lock=True))
                if lock_chain
                else tx.job_get(JobGet(job_id=job.id, lock=True))
            )
            with pytest.raises(InvalidArgumentError):
                await read
            assert await tx.job_get(JobGet(job_id=job.id)) == job  # unlocked reads still work

    @pytest.mark.parametrize("read_only", [False, True], ids=["write", "read_only"])
    async def test_an_ended_transaction_refuses_every_operation(
        self, state_adapter: StateAdapter, now: datetime, read_only: bool
    ) -> None:
        job = await start(state_adapter, now=now)
        async with state_adapter.transaction(read_only=read_only) as tx:
            pass
        with pytest.raises(InvalidArgumentError):
            await tx.job_get(JobGet(job_id=job.id))
        with pytest.raises(InvalidArgumentError):
            await tx.jobs_create(JobsCreate(jobs=[new_job()], now=now))

    async def test_a_root_with_a_chain_index_is_refused(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        fine, odd = new_job(), new_job(chain_index=3)
        async with state_adapter.transaction() as tx:
            with pytest.raises(InvalidArgumentError):
                await tx.jobs_create(JobsCreate(jobs=[fine, odd], now=now))
        assert await find_job(state_adapter, fine.id) is None
        assert await find_job(state_adapter, odd.id) is None

    async def test_a_new_job_id_that_is_not_a_uuid_is_refused(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        fine = new_job()
        async with state_adapter.transaction() as tx:
            with pytest.raises(InvalidJobIdError):
                await tx.jobs_create(JobsCreate(jobs=[fine, new_job(id="not-a-uuid")], now=now))
        assert await find_job(state_adapter, fine.id) is None
