"""Rescue: a heartbeat returns a dead worker's running jobs to pending, the reaper returns
expired leases, both record why; fencing afterwards; per-type leases in one claim.

The rescue texts stored in ``last_attempt_error`` are part of the contract: every backend
writes exactly these lines, so operators (and dashboards) read the same thing everywhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import pytest

from jobchain.contracts import (
    Capability,
    JobComplete,
    JobCompleted,
    JobGet,
    JobRenewLease,
    JobReschedule,
    JobsAcquire,
    StateAdapter,
    StateTx,
    WorkerHeartbeatResult,
)
from jobchain.entities import Job, JobStatus, Schedule, WorkerState
from jobchain.errors import JobTakenByAnotherWorkerError
from jobchain_conformance.capabilities import requires
from jobchain_conformance.helpers import (
    LEASE,
    TYPE,
    acquire,
    acquire_job,
    assert_time,
    complete,
    get_job,
    ids,
    reap,
    refused,
    start,
)
from jobchain_conformance.suites.state_transactions import RollbackError, rolls_back
from jobchain_conformance.suites.state_workers import ALIVE, A, B, C, D, beat, heartbeat, state_of

TIMEOUT = 10.0
"""Seconds after which a heartbeat that should not wait is declared stuck."""


def worker_dead_error(worker_id: str) -> str:
    return f"attempt abandoned: worker {worker_id} stopped heartbeating and was presumed dead"


def lease_expired_error(worker_id: str) -> str:
    return f"attempt abandoned: the lease held by worker {worker_id} expired"


async def _running_for(adapter: StateAdapter, worker_id: str, *, now: datetime, type_name: str = TYPE) -> Job:
    """A new job claimed by ``worker_id`` at ``now``."""
    return await acquire_job(
        adapter, await start(adapter, now=now, type_name=type_name), now=now, worker_id=worker_id
    )


async def _dead_worker_with_a_job(adapter: StateAdapter, now: datetime) -> tuple[Job, datetime]:
    """D registers and claims a job at ``now``, then falls silent: (its running job, a moment it is dead)."""
    await heartbeat(adapter, beat(D, now=now))
    return await _running_for(adapter, D, now=now), now + ALIVE + timedelta(seconds=5)


async def _release(adapter: StateAdapter, at: datetime, caller: str = A) -> WorkerHeartbeatResult:
    return await heartbeat(adapter, beat(caller, now=at, release_dead=True))


class WorkerReleaseTests:
    """worker_heartbeat(release_dead=True): the running jobs of dead workers return to pending."""

    async def test_a_dead_workers_running_job_returns_to_pending_with_the_rescue_recorded(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        running, dead_at = await _dead_worker_with_a_job(state_adapter, now)
        result = await _release(state_adapter, dead_at)
        assert result.dead_worker_ids == [D]
        (released,) = result.released_jobs
        assert released.id == running.id
        assert (released.status, released.leased_by, released.leased_until) == (JobStatus.PENDING, None, None)
        assert (released.rescued_from, released.rescue_reason) == (D, "worker_dead")
        assert released.last_attempt_error == worker_dead_error(D)
        assert_time(state_adapter, released.rescued_at, dead_at)
        assert (released.attempt, released.lease_generation) == (running.attempt, running.lease_generation)
        assert await get_job(state_adapter, running.id) == released

    async def test_a_lease_still_valid_does_not_keep_a_dead_workers_job(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        running, dead_at = await _dead_worker_with_a_job(state_adapter, now)
        assert await reap(state_adapter, now=dead_at, limit=5) == [], "the lease should still be valid"
        assert ids((await _release(state_adapter, dead_at)).released_jobs) == [running.id]

    async def test_jobs_of_every_type_the_dead_worker_ran_are_released(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(D, now=now, type_names=["t", "other"]))
        first = await _running_for(state_adapter, D, now=now)
        second = await _running_for(state_adapter, D, now=now, type_name="other")
        result = await _release(state_adapter, now + ALIVE + timedelta(seconds=5))  # A serves only "t"
        assert sorted(ids(result.released_jobs)) == sorted([first.id, second.id])
        assert (await get_job(state_adapter, second.id)).status is JobStatus.PENDING

    async def test_jobs_of_live_workers_pending_and_completed_jobs_stay_untouched(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(B, now=now, alive_for=timedelta(minutes=5)))
        live = await _running_for(state_adapter, B, now=now)
        doomed, dead_at = await _dead_worker_with_a_job(state_adapter, now)
        done = await _running_for(state_adapter, D, now=now)
        done = (await complete(state_adapter, done.id, now=now, worker_id=D)).job
        mine = await _running_for(state_adapter, A, now=now)
        waiting = await start(state_adapter, now=now)
        result = await _release(state_adapter, dead_at)
        assert ids(result.released_jobs) == [doomed.id]
        for job in (live, done, waiting, mine):
            assert await get_job(state_adapter, job.id) == job

    async def test_a_stopped_workers_jobs_are_left_to_their_lease(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(D, now=now))
        running = await _running_for(state_adapter, D, now=now)
        await heartbeat(state_adapter, beat(D, now=now, state=WorkerState.STOPPED))
        result = await _release(state_adapter, now + ALIVE + timedelta(seconds=5))
        assert (result.released_jobs, result.dead_worker_ids) == ([], [])
        assert await get_job(state_adapter, running.id) == running

    async def test_jobs_of_an_unregistered_worker_are_left_to_their_lease(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        running = await _running_for(state_adapter, D, now=now)
        result = await _release(state_adapter, now + timedelta(minutes=5))
        assert result.released_jobs == []
        assert await get_job(state_adapter, running.id) == running

    async def test_a_released_job_is_claimed_again_and_keeps_its_rescue(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        running, dead_at = await _dead_worker_with_a_job(state_adapter, now)
        await _release(state_adapter, dead_at)
        again = await acquire_job(state_adapter, running, now=dead_at, worker_id=B)
        assert (again.leased_by, again.attempt, again.lease_generation) == (B, 2, 2)
        assert (again.rescued_from, again.rescue_reason) == (D, "worker_dead")
        assert_time(state_adapter, again.rescued_at, dead_at)

    async def test_a_dead_workers_jobs_are_released_once(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        running, dead_at = await _dead_worker_with_a_job(state_adapter, now)
        await _release(state_adapter, dead_at)
        later = await _release(state_adapter, dead_at + timedelta(seconds=1), caller=B)
        assert (later.released_jobs, later.dead_worker_ids) == ([], [])
        assert (await get_job(state_adapter, running.id)).status is JobStatus.PENDING

    async def test_a_rolled_back_release_leaves_the_job_running(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        running, dead_at = await _dead_worker_with_a_job(state_adapter, now)
        with rolls_back():
            async with state_adapter.transaction() as tx:
                result = await tx.worker_heartbeat(beat(A, now=dead_at, release_dead=True))
                assert ids(result.released_jobs) == [running.id]
                raise RollbackError
        assert await get_job(state_adapter, running.id) == running
        assert ids((await _release(state_adapter, dead_at, caller=B)).released_jobs) == [running.id]


class FencingAfterReleaseTests:
    """A presumed-dead worker that was only slow writes nothing with its old lease."""

    async def test_the_dead_worker_cannot_renew(self, state_adapter: StateAdapter, now: datetime) -> None:
        running, dead_at = await _dead_worker_with_a_job(state_adapter, now)
        (released,) = (await _release(state_adapter, dead_at)).released_jobs
        params = JobRenewLease(
            job_id=running.id,
            worker_id=D,
            lease_for=LEASE,
            lease_generation=running.lease_generation,
            now=dead_at,
        )

        async def op(tx: StateTx) -> Job:
            return await tx.job_renew_lease(params)

        await refused(state_adapter, JobTakenByAnotherWorkerError, op)
        assert await get_job(state_adapter, running.id) == released

    async def test_the_dead_worker_cannot_complete_or_reschedule(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        running, dead_at = await _dead_worker_with_a_job(state_adapter, now)
        (released,) = (await _release(state_adapter, dead_at)).released_jobs
        generation = running.lease_generation
        completion = JobComplete(job_id=running.id, worker_id=D, lease_generation=generation, now=dead_at)
        retry = JobReschedule(
            job_id=running.id,
            schedule=Schedule(after=timedelta(minutes=1)),
            error="late",
            worker_id=D,
            lease_generation=generation,
            now=dead_at,
        )

        async def complete_op(tx: StateTx) -> JobCompleted:
            return await tx.job_complete(completion)

        async def reschedule_op(tx: StateTx) -> Job:
            return await tx.job_reschedule(retry)

        await refused(state_adapter, JobTakenByAnotherWorkerError, complete_op)
        await refused(state_adapter, JobTakenByAnotherWorkerError, reschedule_op)
        assert await get_job(state_adapter, running.id) == released

    async def test_the_dead_worker_cannot_complete_once_another_worker_claimed_the_job(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        running, dead_at = await _dead_worker_with_a_job(state_adapter, now)
        await _release(state_adapter, dead_at)
        again = await acquire_job(state_adapter, running, now=dead_at, worker_id=B)
        completion = JobComplete(
            job_id=running.id, worker_id=D, lease_generation=running.lease_generation, now=dead_at
        )

        async def op(tx: StateTx) -> JobCompleted:
            return await tx.job_complete(completion)

        error = await refused(state_adapter, JobTakenByAnotherWorkerError, op)
        assert error.leased_by == B
        assert await get_job(state_adapter, running.id) == again


async def _released_beside_a_hold(
    adapter: StateAdapter, job: Job, release: Callable[[], Awaitable[list[Job]]], *, at: datetime, what: str
) -> Job:
    """An atomic attempt holds ``job`` (``job_get(lock=True)``) while ``release`` runs in its own
    transaction and must release nothing; the attempt then completes the job at ``at`` and
    commits. The stored job."""
    try:
        async with asyncio.timeout(TIMEOUT), adapter.transaction() as attempt:
            held = await attempt.job_get(JobGet(job_id=job.id, lock=True))
            assert held is not None
            released = await release()
            assert released == [], f"{what} released a job whose atomic attempt still held it"
            await attempt.job_complete(
                JobComplete(
                    job_id=job.id, worker_id=job.leased_by, lease_generation=held.lease_generation, now=at
                )
            )
    except TimeoutError:
        pytest.fail("a release waited for an atomic attempt's hold instead of skipping the job")
    return await get_job(adapter, job.id)


class ConcurrentReleaseTests:
    """Heartbeats in separate transactions never both release the same job, and neither a
    heartbeat nor the reaper releases a job an atomic attempt holds (``job_get(lock=True)``):
    the attempt would run beside the job's next claim."""

    @requires(Capability.CONCURRENT_TRANSACTIONS)
    async def test_the_reaper_skips_an_expired_job_an_atomic_attempt_holds(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        running = await _running_for(state_adapter, B, now=now)
        late = now + LEASE + timedelta(seconds=3)
        stored = await _released_beside_a_hold(
            state_adapter, running, lambda: reap(state_adapter, now=late), at=late, what="the reaper"
        )
        assert (stored.status, stored.completed_by, stored.rescue_reason) == (JobStatus.COMPLETED, B, None)

    @requires(Capability.CONCURRENT_TRANSACTIONS)
    async def test_a_heartbeat_skips_a_dead_workers_job_an_atomic_attempt_holds(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        running, dead_at = await _dead_worker_with_a_job(state_adapter, now)

        async def release() -> list[Job]:
            return (await _release(state_adapter, dead_at)).released_jobs

        stored = await _released_beside_a_hold(
            state_adapter, running, release, at=dead_at, what="a heartbeat"
        )
        assert (stored.status, stored.completed_by, stored.rescue_reason) == (JobStatus.COMPLETED, D, None)

    @requires(Capability.CONCURRENT_TRANSACTIONS)
    async def test_a_second_open_transaction_skips_what_the_first_is_releasing(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        running, dead_at = await _dead_worker_with_a_job(state_adapter, now)
        try:
            async with asyncio.timeout(TIMEOUT), state_adapter.transaction() as first:
                mine = await first.worker_heartbeat(beat(A, now=dead_at, release_dead=True))
                async with state_adapter.transaction() as second:
                    theirs = await second.worker_heartbeat(beat(B, now=dead_at, release_dead=True))
        except TimeoutError:
            pytest.fail("a heartbeat waited for another transaction's release instead of skipping its rows")
        assert ids(mine.released_jobs) == [running.id]
        assert (theirs.released_jobs, theirs.dead_worker_ids) == ([], [])
        assert await state_of(state_adapter, D, now=dead_at) is WorkerState.DEAD

    async def test_parallel_heartbeats_release_each_job_once(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(D, now=now))
        await heartbeat(state_adapter, beat(C, now=now))
        jobs = [await _running_for(state_adapter, worker_id, now=now) for worker_id in (D, D, C)]
        dead_at = now + ALIVE + timedelta(seconds=5)
        results = await asyncio.wait_for(
            asyncio.gather(*(_release(state_adapter, dead_at, caller=f"worker-{i}") for i in range(4))),
            timeout=30,
        )
        released = [job.id for result in results for job in result.released_jobs]
        assert sorted(released) == sorted(ids(jobs))
        assert sorted(worker_id for result in results for worker_id in result.dead_worker_ids) == [C, D]


class ReapRescueTests:
    """jobs_reap_expired records the rescue on every job it returns."""

    async def test_reap_records_when_whose_lease_and_why(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        running = await _running_for(state_adapter, B, now=now)
        late = now + LEASE + timedelta(seconds=3)
        (reaped,) = await reap(state_adapter, now=late)
        assert (reaped.rescued_from, reaped.rescue_reason) == (B, "lease_expired")
        assert reaped.last_attempt_error == lease_expired_error(B)
        assert_time(state_adapter, reaped.rescued_at, late)
        assert await get_job(state_adapter, running.id) == reaped

    async def test_a_job_never_rescued_has_no_rescue_fields(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        running = await _running_for(state_adapter, B, now=now)
        assert (running.rescued_at, running.rescued_from, running.rescue_reason) == (None, None, None)

    async def test_the_rescue_stays_after_the_next_claim_and_completion(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        running = await _running_for(state_adapter, B, now=now)
        late = now + LEASE + timedelta(seconds=3)
        await reap(state_adapter, now=late)
        await acquire_job(state_adapter, running, now=late, worker_id=C)
        done = (await complete(state_adapter, running.id, now=late, worker_id=C)).job
        assert (done.rescued_from, done.rescue_reason) == (B, "lease_expired")
        assert_time(state_adapter, done.rescued_at, late)

    async def test_a_later_rescue_replaces_the_earlier_one(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        running = await _running_for(state_adapter, B, now=now)
        late = now + LEASE + timedelta(seconds=3)
        await reap(state_adapter, now=late)
        await heartbeat(state_adapter, beat(D, now=late))
        await acquire_job(state_adapter, running, now=late, worker_id=D)
        dead_at = late + ALIVE + timedelta(seconds=5)
        (released,) = (await _release(state_adapter, dead_at)).released_jobs
        assert (released.rescued_from, released.rescue_reason) == (D, "worker_dead")
        assert released.last_attempt_error == worker_dead_error(D)
        assert_time(state_adapter, released.rescued_at, dead_at)


class PerTypeLeaseTests:
    """jobs_acquire(type_leases=...): each type its own lease, in one claim."""

    async def test_one_claim_gives_each_type_its_own_lease(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        for type_name in ("slow", "quick", "plain"):
            await start(state_adapter, now=now, type_name=type_name)
        at = now + timedelta(seconds=1)
        params = JobsAcquire(
            type_names=["slow", "quick", "plain"],
            worker_id=A,
            lease_for=timedelta(seconds=30),
            type_leases={
                "slow": timedelta(minutes=10),
                "quick": timedelta(seconds=5),
                "absent": timedelta(hours=1),
            },
            limit=5,
            now=at,
        )
        async with state_adapter.transaction() as tx:
            claimed = {job.type_name: job for job in (await tx.jobs_acquire(params)).jobs}
        assert sorted(claimed) == ["plain", "quick", "slow"]
        assert_time(state_adapter, claimed["slow"].leased_until, at + timedelta(minutes=10))
        assert_time(state_adapter, claimed["quick"].leased_until, at + timedelta(seconds=5))
        assert_time(state_adapter, claimed["plain"].leased_until, at + timedelta(seconds=30))
        for job in claimed.values():
            assert await get_job(state_adapter, job.id) == job

    async def test_a_per_type_lease_decides_when_the_reaper_takes_the_job(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        quick = await start(state_adapter, now=now, type_name="quick")
        slow = await start(state_adapter, now=now, type_name="slow")
        params = JobsAcquire(
            type_names=["quick", "slow"],
            worker_id=A,
            lease_for=timedelta(minutes=10),
            type_leases={"quick": timedelta(seconds=5)},
            limit=2,
            now=now,
        )
        async with state_adapter.transaction() as tx:
            await tx.jobs_acquire(params)
        reaped = await reap(
            state_adapter, now=now + timedelta(seconds=6), type_names=["quick", "slow"], limit=5
        )
        assert ids(reaped) == [quick.id]
        assert (await get_job(state_adapter, slow.id)).status is JobStatus.RUNNING
        assert ids(
            (await acquire(state_adapter, now=now + timedelta(seconds=6), type_names=["quick"])).jobs
        ) == [quick.id]
