"""Attempt start times: ``first_attempt_at`` and ``attempt_started_at`` are set by claims only.

Every claim (``jobs_acquire``) sets ``attempt_started_at`` to the claim's ``now`` and, on a
job's first claim, ``first_attempt_at`` as well. Renewal, rescheduling, reaping and
completion keep both, so a completed job tells its wait (``first_attempt_at - created_at``)
and the run time of its last attempt (``completed_at - attempt_started_at``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from jobchain.contracts import StateAdapter
from jobchain.entities import Job, JobStatus, Schedule
from jobchain_conformance.helpers import (
    LEASE,
    WORKER,
    acquire,
    acquire_job,
    assert_time,
    complete,
    get_job,
    reap,
    renew,
    reschedule,
    start,
)


def _assert_attempt_times(adapter: StateAdapter, job: Job, first: datetime, started: datetime) -> None:
    assert_time(adapter, job.first_attempt_at, first)
    assert_time(adapter, job.attempt_started_at, started)


class JobAttemptTimesTests:
    """first_attempt_at / attempt_started_at across claims, retries, reaping and completion."""

    async def test_a_job_never_claimed_has_no_attempt_times(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        assert (job.first_attempt_at, job.attempt_started_at) == (None, None)
        stored = await get_job(state_adapter, job.id)
        assert (stored.first_attempt_at, stored.attempt_started_at) == (None, None)

    async def test_first_claim_sets_both_to_now(self, state_adapter: StateAdapter, now: datetime) -> None:
        job = await start(state_adapter, now=now)
        at = now + timedelta(seconds=7)
        running = await acquire_job(state_adapter, job, now=at)
        _assert_attempt_times(state_adapter, running, at, at)
        assert await get_job(state_adapter, job.id) == running

    async def test_every_job_of_a_batch_claim_is_stamped(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        for _ in range(3):
            await start(state_adapter, now=now)
        at = now + timedelta(seconds=2)
        claimed = await acquire(state_adapter, now=at, limit=3)
        assert len(claimed.jobs) == 3
        for job in claimed.jobs:
            _assert_attempt_times(state_adapter, job, at, at)

    async def test_renewal_and_reschedule_keep_them_and_a_reclaim_moves_only_the_attempt_start(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        first = now + timedelta(seconds=1)
        running = await acquire_job(state_adapter, job, now=first)
        renewed = await renew(
            state_adapter, job.id, now=first + timedelta(seconds=5), lease_generation=running.lease_generation
        )
        _assert_attempt_times(state_adapter, renewed, first, first)
        retry_at = first + timedelta(seconds=10)
        retried = await reschedule(
            state_adapter,
            job.id,
            now=retry_at,
            schedule=Schedule(after=timedelta(seconds=30)),
            worker_id=WORKER,
            lease_generation=running.lease_generation,
        )
        assert retried.status is JobStatus.PENDING
        _assert_attempt_times(state_adapter, retried, first, first)
        second = retry_at + timedelta(seconds=30)
        again = await acquire_job(state_adapter, job, now=second)
        assert again.attempt == 2
        _assert_attempt_times(state_adapter, again, first, second)

    async def test_reaping_an_expired_lease_keeps_them(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        await acquire_job(state_adapter, job, now=now)
        late = now + LEASE + timedelta(seconds=1)
        [reaped] = await reap(state_adapter, now=late)
        assert (reaped.id, reaped.status) == (job.id, JobStatus.PENDING)
        _assert_attempt_times(state_adapter, reaped, now, now)
        _assert_attempt_times(state_adapter, await get_job(state_adapter, job.id), now, now)
        reclaimed = await acquire_job(state_adapter, job, now=late)
        _assert_attempt_times(state_adapter, reclaimed, now, late)

    async def test_completion_by_the_owner_keeps_them(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        at = now + timedelta(seconds=3)
        running = await acquire_job(state_adapter, job, now=at)
        done = await complete(
            state_adapter,
            job.id,
            now=at + timedelta(seconds=4),
            worker_id=WORKER,
            lease_generation=running.lease_generation,
        )
        assert done.job.status is JobStatus.COMPLETED
        _assert_attempt_times(state_adapter, done.job, at, at)
        assert await get_job(state_adapter, job.id) == done.job

    async def test_workerless_completion_of_a_never_claimed_job_leaves_them_empty(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        done = await complete(state_adapter, job.id, now=now + timedelta(seconds=1))
        assert done.job.status is JobStatus.COMPLETED
        assert (done.job.first_attempt_at, done.job.attempt_started_at) == (None, None)
        stored = await get_job(state_adapter, job.id)
        assert (stored.first_attempt_at, stored.attempt_started_at) == (None, None)
