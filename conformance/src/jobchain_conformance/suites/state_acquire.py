"""Claiming work: job_next_available, jobs_acquire (batch, exact has_more, no double claim), reaping."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest

from jobchain.contracts import Capability, JobComplete, JobCompleted, JobsAcquire, StateAdapter, StateTx
from jobchain.entities import JobStatus, Schedule
from jobchain.errors import JobTakenByAnotherWorkerError
from jobchain_conformance.capabilities import requires
from jobchain_conformance.helpers import (
    LEASE,
    OTHER_WORKER,
    WORKER,
    acquire,
    acquire_job,
    assert_duration,
    assert_time,
    complete,
    get_job,
    ids,
    next_available,
    reap,
    refused,
    reschedule,
    run_and_complete,
    start,
)


class JobNextAvailableTests:
    """job_next_available: how long a worker may sleep."""

    async def test_next_available_is_zero_when_a_pending_job_is_eligible(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await start(state_adapter, now=now)
        wait = await next_available(state_adapter, now=now + timedelta(minutes=1))
        assert wait == timedelta(0)

    async def test_next_available_is_the_time_until_the_earliest_scheduled_job(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await start(state_adapter, now=now, schedule=Schedule(after=timedelta(minutes=10)))
        await start(state_adapter, now=now, schedule=Schedule(after=timedelta(minutes=5)))
        wait = await next_available(state_adapter, now=now + timedelta(minutes=1))
        assert_duration(state_adapter, wait, timedelta(minutes=4))

    async def test_next_available_is_none_without_pending_jobs_of_the_types(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await start(state_adapter, now=now, type_name="other")
        assert await next_available(state_adapter, now=now, type_names=["t"]) is None

    async def test_next_available_ignores_blocked_and_running_jobs(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        await start(state_adapter, now=now, blocker_chain_ids=[blocker.id])
        await acquire_job(state_adapter, await start(state_adapter, now=now), now=now)
        assert await next_available(state_adapter, now=now, type_names=["t"]) is None


class JobsAcquireTests:
    """jobs_acquire: oldest eligible first, leases, batches, exact has_more, no double claim."""

    async def test_acquire_claims_the_oldest_eligible_job(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await start(state_adapter, now=now + timedelta(seconds=2))
        oldest = await start(state_adapter, now=now)
        await start(state_adapter, now=now + timedelta(seconds=1))
        acquired = await acquire(state_adapter, now=now + timedelta(seconds=10))
        assert ids(acquired.jobs) == [oldest.id]

    async def test_acquired_job_runs_under_a_lease_for_the_worker(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        at = now + timedelta(seconds=3)
        (claimed,) = (
            await acquire(state_adapter, now=at, worker_id="w-7", lease_for=timedelta(seconds=45))
        ).jobs
        assert claimed.status is JobStatus.RUNNING
        assert claimed.leased_by == "w-7"
        assert_time(state_adapter, claimed.leased_until, at + timedelta(seconds=45))
        assert (claimed.attempt, claimed.lease_generation) == (job.attempt + 1, job.lease_generation + 1)
        assert await get_job(state_adapter, job.id) == claimed

    async def test_acquire_reports_has_more_while_eligible_jobs_remain(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await start(state_adapter, now=now)
        await start(state_adapter, now=now + timedelta(seconds=1))
        acquired = await acquire(state_adapter, now=now + timedelta(seconds=5))
        assert (len(acquired.jobs), acquired.has_more) == (1, True)

    async def test_acquire_reports_no_more_when_the_rest_is_not_yet_eligible(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await start(state_adapter, now=now)
        await start(state_adapter, now=now, schedule=Schedule(after=timedelta(hours=1)))
        acquired = await acquire(state_adapter, now=now)
        assert (len(acquired.jobs), acquired.has_more) == (1, False)

    async def test_acquire_returns_nothing_when_no_job_is_eligible(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        acquired = await acquire(state_adapter, now=now)
        assert (acquired.jobs, acquired.has_more) == ([], False)

    async def test_acquire_skips_jobs_scheduled_in_the_future(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now, schedule=Schedule(after=timedelta(minutes=5)))
        assert (await acquire(state_adapter, now=now + timedelta(minutes=4))).jobs == []
        assert ids((await acquire(state_adapter, now=now + timedelta(minutes=5))).jobs) == [job.id]

    async def test_acquire_claims_only_the_requested_types(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        a, b, c = [await start(state_adapter, now=now, type_name=name) for name in ("a", "b", "c")]
        acquired = await acquire(state_adapter, now=now, type_names=["a", "c"], limit=5)
        assert sorted(ids(acquired.jobs)) == sorted([a.id, c.id])
        assert (await get_job(state_adapter, b.id)).status is JobStatus.PENDING

    async def test_batch_acquire_claims_limit_distinct_oldest_jobs(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        jobs = [await start(state_adapter, now=now + timedelta(seconds=i)) for i in range(5)]
        acquired = await acquire(state_adapter, now=now + timedelta(minutes=1), limit=3)
        assert sorted(ids(acquired.jobs)) == sorted(ids(jobs[:3]))
        assert acquired.has_more is True
        for job in jobs[:3]:
            assert (await get_job(state_adapter, job.id)).leased_by == WORKER
        for job in jobs[3:]:
            assert (await get_job(state_adapter, job.id)).status is JobStatus.PENDING

    async def test_batch_acquire_with_limit_equal_to_eligible_reports_no_more(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        for _ in range(3):
            await start(state_adapter, now=now)
        acquired = await acquire(state_adapter, now=now, limit=3)
        assert (len(acquired.jobs), acquired.has_more) == (3, False)

    async def test_batch_acquire_with_limit_above_eligible_claims_them_all(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        jobs = [await start(state_adapter, now=now) for _ in range(2)]
        acquired = await acquire(state_adapter, now=now, limit=10)
        assert sorted(ids(acquired.jobs)) == sorted(ids(jobs))
        assert acquired.has_more is False
        assert {job.status for job in acquired.jobs} == {JobStatus.RUNNING}

    async def test_acquire_never_claims_blocked_jobs(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        await start(state_adapter, now=now, blocker_chain_ids=[blocker.id])
        acquired = await acquire(state_adapter, now=now + timedelta(hours=1), limit=5)
        assert (acquired.jobs, acquired.has_more) == ([], False)

    async def test_acquire_never_claims_running_or_completed_jobs(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await acquire_job(state_adapter, await start(state_adapter, now=now), now=now)
        await complete(state_adapter, (await start(state_adapter, now=now)).id, now=now)
        acquired = await acquire(
            state_adapter, now=now + timedelta(seconds=1), worker_id=OTHER_WORKER, limit=5
        )
        assert acquired.jobs == []

    async def test_reacquiring_a_rescheduled_job_increments_attempt_and_lease_generation(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        first = await acquire_job(state_adapter, job, now=now)
        await reschedule(
            state_adapter, job.id, now=now, schedule=Schedule(after=timedelta(0)), worker_id=WORKER
        )
        second = await acquire_job(state_adapter, job, now=now + timedelta(seconds=1))
        assert (first.attempt, first.lease_generation) == (1, 1)
        assert (second.attempt, second.lease_generation) == (2, 2)

    @requires(Capability.CONCURRENT_TRANSACTIONS)
    async def test_transactions_open_at_the_same_time_claim_distinct_jobs(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        jobs = [await start(state_adapter, now=now + timedelta(seconds=i)) for i in range(2)]
        params = JobsAcquire(
            type_names=["t"], worker_id=WORKER, lease_for=LEASE, now=now + timedelta(minutes=1)
        )
        try:
            async with asyncio.timeout(10), state_adapter.transaction() as first:
                held = await first.jobs_acquire(params)
                async with state_adapter.transaction() as second:
                    other = await second.jobs_acquire(params)
        except TimeoutError:
            pytest.fail("a second write transaction could not claim while the first was open")
        assert sorted(ids(held.jobs) + ids(other.jobs)) == sorted(ids(jobs))

    async def test_parallel_acquisitions_never_return_the_same_job(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        for i in range(6):
            await start(state_adapter, now=now + timedelta(seconds=i))
        later = now + timedelta(minutes=1)
        results = await asyncio.wait_for(
            asyncio.gather(
                *(acquire(state_adapter, now=later, worker_id=f"w{i}", limit=2) for i in range(5))
            ),
            timeout=30,
        )
        claimed = [(job.id, f"w{i}") for i, result in enumerate(results) for job in result.jobs]
        assert len({job_id for job_id, _ in claimed}) == len(claimed)
        for job_id, worker in claimed:
            assert (await get_job(state_adapter, job_id)).leased_by == worker


class JobsReapExpiredTests:
    """jobs_reap_expired: expired leases go back to pending; valid and excluded ones stay."""

    async def test_reap_returns_an_expired_job_to_pending_without_a_lease(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        await acquire_job(state_adapter, job, now=now)
        (reaped,) = await reap(state_adapter, now=now + LEASE + timedelta(seconds=1))
        assert reaped.id == job.id
        assert (reaped.status, reaped.leased_by, reaped.leased_until) == (JobStatus.PENDING, None, None)
        assert await get_job(state_adapter, job.id) == reaped

    async def test_reap_leaves_valid_leases_alone(self, state_adapter: StateAdapter, now: datetime) -> None:
        job = await start(state_adapter, now=now)
        running = await acquire_job(state_adapter, job, now=now)
        assert await reap(state_adapter, now=now + LEASE - timedelta(seconds=1), limit=5) == []
        assert await get_job(state_adapter, job.id) == running

    async def test_a_lease_is_not_reaped_before_it_has_passed(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        """Not a moment early: the worker's own deadline relies on it (issue 35)."""
        job = await start(state_adapter, now=now)
        running = await acquire_job(state_adapter, job, now=now)
        assert running.leased_until == now + LEASE
        assert await reap(state_adapter, now=now + LEASE, limit=5) == []
        assert await get_job(state_adapter, job.id) == running
        (reaped,) = await reap(state_adapter, now=now + LEASE + state_adapter.time_precision, limit=5)
        assert reaped.id == job.id

    async def test_reap_takes_only_expired_leases(self, state_adapter: StateAdapter, now: datetime) -> None:
        expired = await acquire_job(state_adapter, await start(state_adapter, now=now), now=now)
        fresh_at = now + timedelta(minutes=1)
        await acquire_job(state_adapter, await start(state_adapter, now=fresh_at), now=fresh_at)
        reaped = await reap(state_adapter, now=now + LEASE + timedelta(seconds=5), limit=5)
        assert ids(reaped) == [expired.id]

    async def test_reap_skips_excluded_job_ids(self, state_adapter: StateAdapter, now: datetime) -> None:
        mine = await acquire_job(state_adapter, await start(state_adapter, now=now), now=now)
        theirs = await acquire_job(
            state_adapter,
            await start(state_adapter, now=now + timedelta(seconds=1)),
            now=now + timedelta(seconds=1),
        )
        later = now + LEASE + timedelta(minutes=1)
        reaped = await reap(state_adapter, now=later, exclude_job_ids=[mine.id], limit=5)
        assert ids(reaped) == [theirs.id]
        assert (await get_job(state_adapter, mine.id)).status is JobStatus.RUNNING

    async def test_reap_only_touches_the_requested_types(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        other = await acquire_job(
            state_adapter, await start(state_adapter, now=now, type_name="other"), now=now
        )
        later = now + LEASE + timedelta(minutes=1)
        assert await reap(state_adapter, now=later, type_names=["t"], limit=5) == []
        assert (await get_job(state_adapter, other.id)).status is JobStatus.RUNNING

    async def test_reap_takes_the_oldest_expired_leases_first_up_to_limit(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        running = []
        for i in (2, 0, 1):
            at = now + timedelta(seconds=i)
            running.append(await acquire_job(state_adapter, await start(state_adapter, now=at), now=at))
        reaped = await reap(state_adapter, now=now + timedelta(minutes=5), limit=2)
        oldest_two = sorted(running, key=lambda job: job.leased_until or now)[:2]
        assert sorted(ids(reaped)) == sorted(ids(oldest_two))

    async def test_reaped_job_can_be_claimed_by_another_worker(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        await acquire_job(state_adapter, job, now=now)
        later = now + LEASE + timedelta(seconds=1)
        await reap(state_adapter, now=later)
        again = await acquire_job(state_adapter, job, now=later, worker_id=OTHER_WORKER)
        assert (again.leased_by, again.attempt, again.lease_generation) == (OTHER_WORKER, 2, 2)

    async def test_previous_owner_cannot_complete_a_reaped_job(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        running = await acquire_job(state_adapter, job, now=now)
        later = now + LEASE + timedelta(seconds=1)
        (reaped,) = await reap(state_adapter, now=later)
        params = JobComplete(
            job_id=job.id, worker_id=WORKER, lease_generation=running.lease_generation, now=later
        )

        async def op(tx: StateTx) -> JobCompleted:
            return await tx.job_complete(params)

        await refused(state_adapter, JobTakenByAnotherWorkerError, op)
        assert await get_job(state_adapter, job.id) == reaped

    async def test_reap_keeps_the_attempt_count(self, state_adapter: StateAdapter, now: datetime) -> None:
        job = await start(state_adapter, now=now)
        await acquire_job(state_adapter, job, now=now)
        (reaped,) = await reap(state_adapter, now=now + timedelta(hours=1))
        assert reaped.attempt == 1
        assert (await run_and_complete(state_adapter, job, now=now + timedelta(hours=1))).job.attempt == 2
