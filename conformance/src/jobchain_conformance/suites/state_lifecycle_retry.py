"""jobs_retry: redrive failed or cancelled jobs with a fresh attempt budget, dependents following.

The history stays (``attempt``, ``attempt_errors``, ``last_attempt_error``); ``attempt_base``
moves to ``attempt``; the failure and cancel fields and the lease are cleared. The retried job
is pending at its schedule, or blocked while a blocker chain still runs. Jobs that failed because
a retried job's chain failed go back to blocked with it, recursively. All-or-nothing refusals.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from jobchain.contracts import JobComplete, StateAdapter, StateTx
from jobchain.entities import Job, JobStatus, Schedule, new_id
from jobchain.errors import JobTakenByAnotherWorkerError
from jobchain_conformance.helpers import (
    WORKER,
    acquire_job,
    assert_duration,
    assert_time,
    attempt_error,
    cancel,
    complete,
    fail,
    get_job,
    next_available,
    refused,
    retry,
    start,
)
from jobchain_conformance.suites.state_lifecycle_fail import running_job
from jobchain_conformance.suites.state_lifecycle_propagation import by_id, dependent

SECOND = timedelta(seconds=1)


async def exhausted(adapter: StateAdapter, now: datetime, *, type_name: str = "t") -> Job:
    """A job that ran once under WORKER and was failed by it with an entry in its history."""
    job = await running_job(adapter, now, type_name=type_name)
    entry = attempt_error(job.attempt, at=now, worker_id=WORKER)
    result = await fail(
        adapter,
        job.id,
        now=now,
        error="ValueError: bad",
        worker_id=WORKER,
        lease_generation=job.lease_generation,
        attempt_error=entry,
    )
    return result.job


def assert_redriven(job: Job, before: Job) -> None:
    """``job`` is ``before`` retried: fresh budget, history kept, failure and cancel fields cleared."""
    assert (job.attempt, job.attempt_base, job.attempts_used) == (before.attempt, before.attempt, 0)
    assert (job.attempt_errors, job.last_attempt_error) == (before.attempt_errors, before.last_attempt_error)
    assert (job.failed_at, job.cancelled_at, job.cancel_reason, job.failed_by_chain_id) == (
        None,
        None,
        None,
        None,
    )
    assert (job.leased_by, job.leased_until) == (None, None)


class JobsRetryTests:
    """jobs_retry on the retried jobs themselves."""

    async def test_a_failed_job_is_pending_now_with_a_fresh_budget_and_its_history(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        failed = await exhausted(state_adapter, now)
        at = now + timedelta(minutes=1)
        result = await retry(state_adapter, [failed.id], now=at)
        (retried,) = result.retried
        assert retried.status is JobStatus.PENDING
        assert_redriven(retried, failed)
        assert_time(state_adapter, retried.scheduled_at, at)
        assert (result.reblocked, result.not_found, result.not_retryable, result.blocked_by_failed) == (
            [],
            [],
            [],
            [],
        )
        assert await get_job(state_adapter, failed.id) == retried

    async def test_a_retried_job_runs_again_counting_attempts_from_the_retry(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        failed = await exhausted(state_adapter, now)
        await retry(state_adapter, [failed.id], now=now)
        again = await acquire_job(state_adapter, failed, now=now + SECOND)
        assert (again.attempt, again.attempt_base, again.attempts_used) == (2, 1, 1)
        assert again.lease_generation > failed.lease_generation
        done = await complete(
            state_adapter,
            failed.id,
            now=now + SECOND,
            worker_id=WORKER,
            lease_generation=again.lease_generation,
        )
        assert (done.job.status, done.job.attempt_errors) == (JobStatus.COMPLETED, failed.attempt_errors)

    async def test_a_retry_can_be_scheduled_later_and_is_clamped_to_now(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        later = await exhausted(state_adapter, now, type_name="later")
        past = await exhausted(state_adapter, now, type_name="past")
        await retry(state_adapter, [later.id], now=now, schedule=Schedule(after=timedelta(minutes=5)))
        await retry(state_adapter, [past.id], now=now, schedule=Schedule(at=now - timedelta(hours=1)))
        assert_time(
            state_adapter, (await get_job(state_adapter, later.id)).scheduled_at, now + timedelta(minutes=5)
        )
        assert_time(state_adapter, (await get_job(state_adapter, past.id)).scheduled_at, now)
        waiting = await next_available(state_adapter, now=now, type_names=["later"])
        assert_duration(state_adapter, waiting, timedelta(minutes=5))

    async def test_a_cancelled_running_job_is_retried_and_its_old_attempt_stays_fenced(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running_job(state_adapter, now)
        (cancelled,) = (await cancel(state_adapter, [job.id], now=now, reason="oops")).cancelled
        (retried,) = (await retry(state_adapter, [job.id], now=now)).retried
        assert retried.status is JobStatus.PENDING
        assert_redriven(retried, cancelled)

        async def late(tx: StateTx) -> object:
            return await tx.job_complete(
                JobComplete(job_id=job.id, worker_id=WORKER, lease_generation=job.lease_generation, now=now)
            )

        await refused(state_adapter, JobTakenByAnotherWorkerError, late)
        assert await get_job(state_adapter, job.id) == retried

    async def test_a_job_whose_blocker_still_runs_is_retried_blocked(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        job = await dependent(state_adapter, now, blocker)
        await cancel(state_adapter, [job.id], now=now)
        (retried,) = (await retry(state_adapter, [job.id], now=now)).retried
        assert retried.status is JobStatus.BLOCKED
        completed = await complete(state_adapter, blocker.id, now=now + SECOND)
        assert [j.id for j in completed.unblocked_jobs] == [job.id]

    async def test_retrying_a_job_and_its_opted_in_dependent_together_blocks_the_dependent(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        job = await dependent(state_adapter, now, blocker, opt_in=True)
        await cancel(state_adapter, [job.id], now=now)
        await fail(state_adapter, blocker.id, now=now)
        result = await retry(state_adapter, [job.id, blocker.id], now=now)
        statuses = {j.id: j.status for j in result.retried}
        assert statuses == {job.id: JobStatus.BLOCKED, blocker.id: JobStatus.PENDING}

    async def test_an_opted_in_job_with_only_finished_blockers_is_retried_pending(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        job = await dependent(state_adapter, now, blocker, opt_in=True)
        await cancel(state_adapter, [job.id], now=now)
        await fail(state_adapter, blocker.id, now=now)
        (retried,) = (await retry(state_adapter, [job.id], now=now)).retried
        assert retried.status is JobStatus.PENDING


class RetryRefusalTests:
    """jobs_retry is all-or-nothing: missing, not failed or cancelled, or blocked by a failed chain."""

    async def test_missing_and_unfinished_jobs_refuse_the_whole_request(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        failed = await exhausted(state_adapter, now)
        pending = await start(state_adapter, now=now, type_name="pending")
        done = (await complete(state_adapter, (await start(state_adapter, now=now)).id, now=now)).job
        running = await running_job(state_adapter, now, type_name="running")
        missing = new_id()
        result = await retry(state_adapter, [failed.id, pending.id, missing, done.id, running.id], now=now)
        assert (result.retried, result.reblocked) == ([], [])
        assert result.not_found == [missing]
        assert sorted(result.not_retryable) == sorted(
            [(pending.id, "pending"), (done.id, "completed"), (running.id, "running")]
        )
        assert await get_job(state_adapter, failed.id) == failed
        assert await get_job(state_adapter, pending.id) == pending

    async def test_an_empty_request_retries_nothing(self, state_adapter: StateAdapter, now: datetime) -> None:
        failed = await exhausted(state_adapter, now)
        result = await retry(state_adapter, [], now=now)
        assert (result.retried, result.reblocked, result.not_found, result.not_retryable) == ([], [], [], [])
        assert await get_job(state_adapter, failed.id) == failed

    async def test_a_job_failed_by_a_still_failed_blocker_is_refused_naming_it(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        job = await dependent(state_adapter, now, blocker)
        await fail(state_adapter, blocker.id, now=now)
        failed = await get_job(state_adapter, job.id)
        result = await retry(state_adapter, [job.id], now=now)
        assert (result.retried, result.blocked_by_failed) == ([], [(job.id, blocker.id)])
        assert await get_job(state_adapter, job.id) == failed

    async def test_a_cancelled_job_whose_blocker_failed_meanwhile_is_refused(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        job = await dependent(state_adapter, now, blocker)
        (cancelled,) = (await cancel(state_adapter, [job.id], now=now)).cancelled
        await fail(state_adapter, blocker.id, now=now)
        result = await retry(state_adapter, [job.id], now=now)
        assert result.blocked_by_failed == [(job.id, blocker.id)]
        assert await get_job(state_adapter, job.id) == cancelled


class RetryDependentsTests:
    """Dependents that failed because of a retried job's chain follow it back to blocked."""

    async def test_dependents_return_to_blocked_several_levels_deep(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = await start(state_adapter, now=now, type_name="first")
        second = await dependent(state_adapter, now, first, type_name="second")
        third = await dependent(state_adapter, now, second, type_name="third")
        await fail(state_adapter, first.id, now=now)
        before = {job.id: await get_job(state_adapter, job.id) for job in (second, third)}
        result = await retry(state_adapter, [first.id], now=now + SECOND)
        assert [j.id for j in result.retried] == [first.id]
        after = {job.id: await get_job(state_adapter, job.id) for job in (second, third)}
        assert by_id(result.reblocked) == after
        for job_id, job in after.items():
            assert job.status is JobStatus.BLOCKED
            assert_redriven(job, before[job_id])
            assert job.scheduled_at == before[job_id].scheduled_at
        completed = await complete(state_adapter, first.id, now=now + SECOND)
        assert [j.id for j in completed.unblocked_jobs] == [second.id]
        completed = await complete(state_adapter, second.id, now=now + SECOND)
        assert [j.id for j in completed.unblocked_jobs] == [third.id]

    async def test_dependents_of_a_retried_cancelled_chain_follow_it(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        job = await dependent(state_adapter, now, blocker)
        await cancel(state_adapter, [blocker.id], now=now)
        result = await retry(state_adapter, [blocker.id], now=now)
        assert [(j.id, j.status) for j in result.reblocked] == [(job.id, JobStatus.BLOCKED)]

    async def test_a_dependent_cancelled_on_its_own_stays_cancelled(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        job = await dependent(state_adapter, now, blocker)
        await cancel(state_adapter, [job.id], now=now)
        await fail(state_adapter, blocker.id, now=now)
        cancelled = await get_job(state_adapter, job.id)
        result = await retry(state_adapter, [blocker.id], now=now)
        assert result.reblocked == []
        assert await get_job(state_adapter, job.id) == cancelled

    async def test_a_dependent_with_another_failed_blocker_stays_failed_naming_that_one(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = await start(state_adapter, now=now, type_name="first")
        second = await start(state_adapter, now=now, type_name="second")
        job = await dependent(state_adapter, now, first, second)
        await fail(state_adapter, first.id, now=now)
        await fail(state_adapter, second.id, now=now)
        result = await retry(state_adapter, [first.id], now=now)
        assert result.reblocked == []
        stored = await get_job(state_adapter, job.id)
        assert (stored.status, stored.failed_by_chain_id) == (JobStatus.FAILED, second.id)
        result = await retry(state_adapter, [second.id], now=now)
        assert [(j.id, j.status) for j in result.reblocked] == [(job.id, JobStatus.BLOCKED)]
        await complete(state_adapter, first.id, now=now)
        completed = await complete(state_adapter, second.id, now=now)
        assert [j.id for j in completed.unblocked_jobs] == [job.id]
