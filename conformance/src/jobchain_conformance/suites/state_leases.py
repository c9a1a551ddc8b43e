"""Lease ownership: job_renew_lease, job_reschedule, job_complete; typed refusals change nothing."""

from __future__ import annotations

from datetime import datetime, timedelta

from jobchain.contracts import (
    JobComplete,
    JobCompleted,
    JobRenewLease,
    JobReschedule,
    StateAdapter,
    StateTx,
)
from jobchain.entities import Job, JobStatus, Schedule, new_id
from jobchain.errors import (
    JobAlreadyCompletedError,
    JobNotFoundError,
    JobTakenByAnotherWorkerError,
    LeaseLostError,
)
from jobchain_conformance.helpers import (
    LEASE,
    OTHER_WORKER,
    WORKER,
    acquire_job,
    assert_time,
    complete,
    get_job,
    refused,
    renew,
    reschedule,
    start,
)


async def _running(adapter: StateAdapter, now: datetime) -> Job:
    """A job running under WORKER's lease (generation 1)."""
    return await acquire_job(adapter, await start(adapter, now=now), now=now)


async def _running_again(adapter: StateAdapter, now: datetime) -> tuple[Job, Job]:
    """The same job claimed twice by WORKER: (first claim, second claim)."""
    first = await _running(adapter, now)
    await reschedule(adapter, first.id, now=now, schedule=Schedule(after=timedelta(0)), worker_id=WORKER)
    return first, await acquire_job(adapter, first, now=now + timedelta(seconds=1))


def _renewal(
    job_id: str, at: datetime, *, worker_id: str = WORKER, generation: int | None = None
) -> JobRenewLease:
    return JobRenewLease(
        job_id=job_id, worker_id=worker_id, lease_for=LEASE, lease_generation=generation, now=at
    )


def _retry(
    job_id: str, at: datetime, *, worker_id: str | None = WORKER, generation: int | None = None
) -> JobReschedule:
    return JobReschedule(
        job_id=job_id,
        schedule=Schedule(after=timedelta(minutes=1)),
        error="retry",
        worker_id=worker_id,
        lease_generation=generation,
        now=at,
    )


def _completion(
    job_id: str, at: datetime, *, worker_id: str | None = WORKER, generation: int | None = None
) -> JobComplete:
    return JobComplete(job_id=job_id, output="out", worker_id=worker_id, lease_generation=generation, now=at)


class JobRenewLeaseTests:
    """job_renew_lease: only the current owner extends a lease."""

    async def test_owner_extends_its_lease(self, state_adapter: StateAdapter, now: datetime) -> None:
        job = await _running(state_adapter, now)
        at = now + timedelta(seconds=20)
        renewed = await renew(state_adapter, job.id, now=at, lease_for=timedelta(minutes=2))
        assert (renewed.status, renewed.leased_by) == (JobStatus.RUNNING, WORKER)
        assert_time(state_adapter, renewed.leased_until, at + timedelta(minutes=2))
        assert await get_job(state_adapter, job.id) == renewed

    async def test_each_renewal_moves_leased_until(self, state_adapter: StateAdapter, now: datetime) -> None:
        job = await _running(state_adapter, now)
        await renew(state_adapter, job.id, now=now + timedelta(seconds=10))
        again = await renew(state_adapter, job.id, now=now + timedelta(seconds=25))
        assert_time(state_adapter, again.leased_until, now + timedelta(seconds=25) + LEASE)

    async def test_renewal_keeps_the_lease_generation_and_attempt(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await _running(state_adapter, now)
        renewed = await renew(state_adapter, job.id, now=now, lease_generation=job.lease_generation)
        assert (renewed.lease_generation, renewed.attempt) == (job.lease_generation, job.attempt)

    async def test_expired_but_unreaped_lease_is_still_renewable(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await _running(state_adapter, now)
        late = now + LEASE + timedelta(minutes=5)
        renewed = await renew(state_adapter, job.id, now=late)
        assert_time(state_adapter, renewed.leased_until, late + LEASE)

    async def test_non_owner_renewal_is_refused_and_changes_nothing(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await _running(state_adapter, now)

        async def op(tx: StateTx) -> Job:
            return await tx.job_renew_lease(_renewal(job.id, now, worker_id=OTHER_WORKER))

        error = await refused(state_adapter, JobTakenByAnotherWorkerError, op)
        assert (error.job_id, error.worker_id, error.leased_by) == (job.id, OTHER_WORKER, WORKER)
        assert await get_job(state_adapter, job.id) == job

    async def test_renewal_with_a_stale_lease_generation_is_refused(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first, second = await _running_again(state_adapter, now)

        async def op(tx: StateTx) -> Job:
            return await tx.job_renew_lease(_renewal(first.id, now, generation=first.lease_generation))

        await refused(state_adapter, JobTakenByAnotherWorkerError, op)
        assert await get_job(state_adapter, first.id) == second

    async def test_renewing_a_completed_job_raises_already_completed(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await _running(state_adapter, now)
        done = (await complete(state_adapter, job.id, now=now, worker_id=WORKER)).job

        async def op(tx: StateTx) -> Job:
            return await tx.job_renew_lease(_renewal(job.id, now))

        assert (await refused(state_adapter, JobAlreadyCompletedError, op)).job_id == job.id
        assert await get_job(state_adapter, job.id) == done

    async def test_renewing_a_missing_job_raises_job_not_found(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        missing = new_id()

        async def op(tx: StateTx) -> Job:
            return await tx.job_renew_lease(_renewal(missing, now))

        assert (await refused(state_adapter, JobNotFoundError, op)).job_id == missing


class JobRescheduleTests:
    """job_reschedule: back to pending at a clamped time, error recorded, lease cleared."""

    async def test_running_job_returns_to_pending_after_the_delay(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await _running(state_adapter, now)
        at = now + timedelta(seconds=7)
        moved = await reschedule(
            state_adapter,
            job.id,
            now=at,
            schedule=Schedule(after=timedelta(seconds=10)),
            error="E1",
            worker_id=WORKER,
        )
        assert (moved.status, moved.leased_by, moved.leased_until) == (JobStatus.PENDING, None, None)
        assert moved.last_attempt_error == "E1"
        assert_time(state_adapter, moved.scheduled_at, at + timedelta(seconds=10))
        assert_time(state_adapter, moved.last_attempt_at, at)
        assert await get_job(state_adapter, job.id) == moved

    async def test_reschedule_to_an_absolute_time(self, state_adapter: StateAdapter, now: datetime) -> None:
        job = await _running(state_adapter, now)
        when = now + timedelta(hours=3)
        moved = await reschedule(state_adapter, job.id, now=now, schedule=Schedule(at=when), worker_id=WORKER)
        assert_time(state_adapter, moved.scheduled_at, when)

    async def test_reschedule_clamps_a_past_time_to_now(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await _running(state_adapter, now)
        at = now + timedelta(seconds=30)
        moved = await reschedule(
            state_adapter, job.id, now=at, schedule=Schedule(at=now - timedelta(days=1)), worker_id=WORKER
        )
        assert_time(state_adapter, moved.scheduled_at, at)

    async def test_reschedule_keeps_the_attempt_count(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await _running(state_adapter, now)
        moved = await reschedule(
            state_adapter, job.id, now=now, schedule=Schedule(after=timedelta(0)), worker_id=WORKER
        )
        assert moved.attempt == job.attempt == 1

    async def test_pending_job_can_be_rescheduled_without_a_worker(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        moved = await reschedule(state_adapter, job.id, now=now, schedule=Schedule(after=timedelta(hours=1)))
        assert moved.status is JobStatus.PENDING
        assert_time(state_adapter, moved.scheduled_at, now + timedelta(hours=1))
        assert moved.last_attempt_error == "boom"

    async def test_non_owner_reschedule_is_refused_and_changes_nothing(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await _running(state_adapter, now)

        async def op(tx: StateTx) -> Job:
            return await tx.job_reschedule(_retry(job.id, now, worker_id=OTHER_WORKER))

        error = await refused(state_adapter, JobTakenByAnotherWorkerError, op)
        assert (error.job_id, error.leased_by) == (job.id, WORKER)
        assert await get_job(state_adapter, job.id) == job

    async def test_reschedule_with_a_stale_lease_generation_is_refused(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first, second = await _running_again(state_adapter, now)

        async def op(tx: StateTx) -> Job:
            return await tx.job_reschedule(_retry(first.id, now, generation=first.lease_generation))

        await refused(state_adapter, JobTakenByAnotherWorkerError, op)
        assert await get_job(state_adapter, first.id) == second

    async def test_rescheduling_a_completed_job_raises_already_completed(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        done = (await complete(state_adapter, job.id, now=now)).job

        async def op(tx: StateTx) -> Job:
            return await tx.job_reschedule(_retry(job.id, now, worker_id=None))

        assert (await refused(state_adapter, JobAlreadyCompletedError, op)).job_id == job.id
        assert await get_job(state_adapter, job.id) == done

    async def test_rescheduling_a_missing_job_raises_job_not_found(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        async def op(tx: StateTx) -> Job:
            return await tx.job_reschedule(_retry(new_id(), now, worker_id=None))

        await refused(state_adapter, JobNotFoundError, op)


class JobCompleteTests:
    """job_complete: owner or workerless completion; what it reports; refusals."""

    async def test_owner_completes_a_running_job_with_its_output(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await _running(state_adapter, now)
        at = now + timedelta(seconds=12)
        done = await complete(
            state_adapter, job.id, now=at, output={"ok": True}, worker_id=WORKER, lease_generation=1
        )
        stored = await get_job(state_adapter, job.id)
        assert stored == done.job
        assert (stored.status, stored.output, stored.completed_by) == (
            JobStatus.COMPLETED,
            {"ok": True},
            WORKER,
        )
        assert (stored.leased_by, stored.leased_until) == (None, None)
        assert_time(state_adapter, stored.completed_at, at)
        assert (done.was_running, done.previous_leased_by) == (True, WORKER)

    async def test_completion_clears_the_last_attempt_error(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await _running(state_adapter, now)
        await reschedule(
            state_adapter, job.id, now=now, schedule=Schedule(after=timedelta(0)), worker_id=WORKER
        )
        await acquire_job(state_adapter, job, now=now + timedelta(seconds=1))
        done = await complete(state_adapter, job.id, now=now + timedelta(seconds=2), worker_id=WORKER)
        assert done.job.last_attempt_error is None
        assert (await get_job(state_adapter, job.id)).last_attempt_error is None

    async def test_workerless_completion_of_a_pending_job(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        done = await complete(state_adapter, job.id, now=now, output=[1, 2])
        assert (done.job.status, done.job.output, done.job.completed_by) == (
            JobStatus.COMPLETED,
            [1, 2],
            None,
        )
        assert (done.was_running, done.previous_leased_by) == (False, None)

    async def test_workerless_completion_of_a_blocked_job(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        job = await start(state_adapter, now=now, blocker_chain_ids=[blocker.id])
        done = await complete(state_adapter, job.id, now=now, output="skipped")
        assert (done.job.status, done.was_running) == (JobStatus.COMPLETED, False)
        assert (await get_job(state_adapter, job.id)).output == "skipped"

    async def test_workerless_completion_of_a_running_job_reports_its_previous_owner(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await _running(state_adapter, now)
        done = await complete(state_adapter, job.id, now=now)
        assert (done.was_running, done.previous_leased_by) == (True, WORKER)
        assert (done.job.completed_by, done.job.leased_by) == (None, None)

    async def test_non_owner_completion_is_refused_and_changes_nothing(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await _running(state_adapter, now)

        async def op(tx: StateTx) -> JobCompleted:
            return await tx.job_complete(_completion(job.id, now, worker_id=OTHER_WORKER))

        error = await refused(state_adapter, JobTakenByAnotherWorkerError, op)
        assert (error.job_id, error.worker_id, error.leased_by) == (job.id, OTHER_WORKER, WORKER)
        assert await get_job(state_adapter, job.id) == job

    async def test_worker_cannot_complete_a_job_it_never_claimed(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)

        async def op(tx: StateTx) -> JobCompleted:
            return await tx.job_complete(_completion(job.id, now))

        await refused(state_adapter, JobTakenByAnotherWorkerError, op)
        assert await get_job(state_adapter, job.id) == job

    async def test_completion_with_a_stale_lease_generation_is_refused(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first, second = await _running_again(state_adapter, now)

        async def op(tx: StateTx) -> JobCompleted:
            return await tx.job_complete(_completion(first.id, now, generation=first.lease_generation))

        await refused(state_adapter, LeaseLostError, op)
        assert await get_job(state_adapter, first.id) == second

    async def test_completion_with_the_current_lease_generation_succeeds(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        _, second = await _running_again(state_adapter, now)
        at = now + timedelta(seconds=2)
        done = await complete(
            state_adapter, second.id, now=at, worker_id=WORKER, lease_generation=second.lease_generation
        )
        assert done.job.status is JobStatus.COMPLETED

    async def test_completing_a_completed_job_raises_already_completed(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        done = (await complete(state_adapter, job.id, now=now, output="first")).job

        async def op(tx: StateTx) -> JobCompleted:
            return await tx.job_complete(_completion(job.id, now, worker_id=None))

        assert (await refused(state_adapter, JobAlreadyCompletedError, op)).job_id == job.id
        assert await get_job(state_adapter, job.id) == done

    async def test_completing_a_missing_job_raises_job_not_found(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        missing = new_id()

        async def op(tx: StateTx) -> JobCompleted:
            return await tx.job_complete(_completion(missing, now, worker_id=None))

        assert (await refused(state_adapter, JobNotFoundError, op)).job_id == missing
