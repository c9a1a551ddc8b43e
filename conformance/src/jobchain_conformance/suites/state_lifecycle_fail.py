"""job_fail and the error history: failing for good, fencing afterwards, what each operation appends.

The error history (``Job.attempt_errors``) keeps the last ``ATTEMPT_ERRORS_KEPT`` entries,
oldest first; reschedule and fail append the caller's entry, a reap or a dead worker's
release appends an ``AttemptAbandoned`` entry naming the abandoned attempt and its worker.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from jobchain.contracts import (
    JobComplete,
    JobFail,
    JobRenewLease,
    JobReschedule,
    JobsList,
    StateAdapter,
    StateTx,
)
from jobchain.entities import (
    ATTEMPT_ERRORS_KEPT,
    MAX_ERROR_MESSAGE_CHARS,
    MAX_TRACEBACK_CHARS,
    AttemptError,
    Job,
    JobStatus,
    Schedule,
    new_id,
)
from jobchain.errors import (
    JobAlreadyCompletedError,
    JobFinishedError,
    JobNotFoundError,
    JobTakenByAnotherWorkerError,
)
from jobchain_conformance.helpers import (
    LEASE,
    OTHER_WORKER,
    TYPE,
    WORKER,
    acquire,
    acquire_job,
    assert_time,
    attempt_error,
    complete,
    fail,
    get_chain,
    get_job,
    reap,
    refused,
    reschedule,
    start,
)
from jobchain_conformance.suites.state_workers import ALIVE, A, D, beat, heartbeat

SECOND = timedelta(seconds=1)


async def running_job(
    adapter: StateAdapter, now: datetime, *, worker_id: str = WORKER, type_name: str = TYPE
) -> Job:
    """A new job of ``type_name`` (no other pending job of that type) claimed by ``worker_id`` at ``now``."""
    job = await start(adapter, now=now, type_name=type_name)
    return await acquire_job(adapter, job, now=now, worker_id=worker_id)


async def rescheduled_with(adapter: StateAdapter, job: Job, entry: AttemptError, *, now: datetime) -> Job:
    """Reschedule ``job`` (running under WORKER) due now, appending ``entry`` to its history."""
    async with adapter.transaction() as tx:
        return await tx.job_reschedule(
            JobReschedule(
                job_id=job.id,
                schedule=Schedule(after=timedelta(0)),
                error=entry.message,
                worker_id=WORKER,
                lease_generation=job.lease_generation,
                attempt_error=entry,
                now=now,
            )
        )


async def job_count(adapter: StateAdapter) -> int:
    async with adapter.transaction(read_only=True) as tx:
        return len((await tx.jobs_list(JobsList(limit=500))).items)


class JobFailTests:
    """job_fail: status failed for good, the error recorded; fencing as for a reschedule."""

    async def test_the_owner_fails_its_running_job_with_the_error_recorded(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running_job(state_adapter, now)
        entry = attempt_error(job.attempt, at=now + SECOND, worker_id=WORKER)
        result = await fail(
            state_adapter,
            job.id,
            now=now + SECOND,
            error="ValueError: bad",
            worker_id=WORKER,
            lease_generation=job.lease_generation,
            attempt_error=entry,
        )
        failed = result.job
        assert (failed.status, failed.leased_by, failed.leased_until) == (JobStatus.FAILED, None, None)
        assert (failed.last_attempt_error, failed.attempt_errors) == ("ValueError: bad", (entry,))
        assert (failed.attempt, failed.attempt_base, failed.failed_by_chain_id) == (1, 0, None)
        assert_time(state_adapter, failed.failed_at, now + SECOND)
        assert_time(state_adapter, failed.last_attempt_at, now + SECOND)
        assert (failed.scheduled_at, failed.lease_generation) == (job.scheduled_at, job.lease_generation)
        assert (result.was_running, result.previous_leased_by) == (True, WORKER)
        assert (result.failed_jobs, result.unblocked_jobs) == ([], [])
        assert await get_job(state_adapter, job.id) == failed

    async def test_the_chain_of_a_failed_job_is_failed(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running_job(state_adapter, now)
        await fail(state_adapter, job.id, now=now, worker_id=WORKER)
        chain = await get_chain(state_adapter, job.chain_id)
        assert chain.status is JobStatus.FAILED
        assert_time(state_adapter, chain.finished_at, now)

    async def test_a_workerless_fail_fails_a_pending_job(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        result = await fail(state_adapter, job.id, now=now + SECOND, error="operator gave up")
        assert (result.job.status, result.job.last_attempt_error) == (JobStatus.FAILED, "operator gave up")
        assert (result.was_running, result.job.attempt, result.job.attempt_errors) == (False, 0, ())
        assert result.job.scheduled_at == job.scheduled_at
        assert_time(state_adapter, result.job.last_attempt_at, now + SECOND)
        assert await get_job(state_adapter, job.id) == result.job

    async def test_a_workerless_fail_fails_a_blocked_job(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        job = await start(state_adapter, now=now, blocker_chain_ids=[blocker.id])
        result = await fail(state_adapter, job.id, now=now)
        assert result.job.status is JobStatus.FAILED
        assert (await get_job(state_adapter, blocker.id)).status is JobStatus.PENDING

    async def test_a_failed_job_is_never_claimed(self, state_adapter: StateAdapter, now: datetime) -> None:
        job = await start(state_adapter, now=now)
        await fail(state_adapter, job.id, now=now)
        assert (await acquire(state_adapter, now=now + timedelta(hours=1))).jobs == []

    async def test_fail_without_an_entry_keeps_the_history_as_it_was(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running_job(state_adapter, now)
        entry = attempt_error(1, at=now, worker_id=WORKER)
        await rescheduled_with(state_adapter, job, entry, now=now)
        again = await acquire_job(state_adapter, job, now=now + SECOND)
        result = await fail(state_adapter, job.id, now=now + SECOND, worker_id=WORKER)
        assert (result.job.attempt, result.job.attempt_errors) == (again.attempt, (entry,))

    async def test_a_non_owner_fail_is_refused_and_changes_nothing(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running_job(state_adapter, now)

        async def op(tx: StateTx) -> object:
            return await tx.job_fail(JobFail(job_id=job.id, error="x", worker_id=OTHER_WORKER, now=now))

        await refused(state_adapter, JobTakenByAnotherWorkerError, op)
        assert await get_job(state_adapter, job.id) == job

    async def test_a_fail_with_a_stale_lease_generation_is_refused(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running_job(state_adapter, now)
        await reschedule(
            state_adapter, job.id, now=now, schedule=Schedule(after=timedelta(0)), worker_id=WORKER
        )
        second = await acquire_job(state_adapter, job, now=now + SECOND)

        async def op(tx: StateTx) -> object:
            return await tx.job_fail(
                JobFail(
                    job_id=job.id, error="x", worker_id=WORKER, lease_generation=job.lease_generation, now=now
                )
            )

        await refused(state_adapter, JobTakenByAnotherWorkerError, op)
        assert await get_job(state_adapter, job.id) == second

    async def test_failing_an_unknown_job_raises_not_found_and_writes_nothing(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await start(state_adapter, now=now)
        missing = new_id()

        async def op(tx: StateTx) -> object:
            return await tx.job_fail(JobFail(job_id=missing, error="x", now=now))

        assert (await refused(state_adapter, JobNotFoundError, op)).job_id == missing
        assert await job_count(state_adapter) == 1

    async def test_failing_a_completed_job_raises_already_completed(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        done = (await complete(state_adapter, job.id, now=now)).job

        async def op(tx: StateTx) -> object:
            return await tx.job_fail(JobFail(job_id=job.id, error="x", now=now))

        await refused(state_adapter, JobAlreadyCompletedError, op)
        assert await get_job(state_adapter, job.id) == done


class FailedJobFencingTests:
    """After job_fail: the worker's late writes are refused as taken, workerless ones as finished."""

    async def _failed(self, adapter: StateAdapter, now: datetime) -> Job:
        job = await running_job(adapter, now)
        return (
            await fail(adapter, job.id, now=now, worker_id=WORKER, lease_generation=job.lease_generation)
        ).job

    async def test_the_workers_renewal_completion_reschedule_and_fail_are_refused(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        failed = await self._failed(state_adapter, now)
        generation = failed.lease_generation
        later = now + SECOND
        operations = [
            lambda tx: tx.job_renew_lease(
                JobRenewLease(
                    job_id=failed.id,
                    worker_id=WORKER,
                    lease_for=LEASE,
                    lease_generation=generation,
                    now=later,
                )
            ),
            lambda tx: tx.job_complete(
                JobComplete(job_id=failed.id, worker_id=WORKER, lease_generation=generation, now=later)
            ),
            lambda tx: tx.job_reschedule(
                JobReschedule(
                    job_id=failed.id,
                    schedule=Schedule(after=timedelta(0)),
                    error="late",
                    worker_id=WORKER,
                    lease_generation=generation,
                    now=later,
                )
            ),
            lambda tx: tx.job_fail(
                JobFail(
                    job_id=failed.id, error="late", worker_id=WORKER, lease_generation=generation, now=later
                )
            ),
        ]
        for op in operations:
            await refused(state_adapter, JobTakenByAnotherWorkerError, op)
        assert await get_job(state_adapter, failed.id) == failed

    async def test_workerless_writes_to_a_failed_job_raise_finished(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        failed = await self._failed(state_adapter, now)
        operations = [
            lambda tx: tx.job_complete(JobComplete(job_id=failed.id, now=now)),
            lambda tx: tx.job_reschedule(
                JobReschedule(job_id=failed.id, schedule=Schedule(after=timedelta(0)), error="x", now=now)
            ),
            lambda tx: tx.job_fail(JobFail(job_id=failed.id, error="again", now=now)),
        ]
        for op in operations:
            error = await refused(state_adapter, JobFinishedError, op)
            assert (error.job_id, error.status) == (failed.id, "failed")
        assert await get_job(state_adapter, failed.id) == failed


class ErrorHistoryTests:
    """attempt_errors: appended by reschedule, fail, reap and release; the last N kept, oldest first."""

    async def test_reschedule_appends_its_entry_and_only_when_given(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running_job(state_adapter, now)
        entry = attempt_error(1, at=now, worker_id=WORKER, message="first")
        first = await rescheduled_with(state_adapter, job, entry, now=now)
        assert (first.attempt_errors, first.last_attempt_error) == ((entry,), "first")
        again = await acquire_job(state_adapter, job, now=now + SECOND)
        plain = await reschedule(
            state_adapter,
            job.id,
            now=now + SECOND,
            schedule=Schedule(after=timedelta(0)),
            worker_id=WORKER,
            lease_generation=again.lease_generation,
        )
        assert plain.attempt_errors == (entry,)
        assert await get_job(state_adapter, job.id) == plain

    async def test_a_released_attempt_uses_none_of_the_budget(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running_job(state_adapter, now)
        assert (job.attempt, job.attempt_base) == (1, 0)
        released = await reschedule(
            state_adapter,
            job.id,
            now=now + SECOND,
            schedule=Schedule(after=timedelta(0)),
            error="released",
            worker_id=WORKER,
            lease_generation=job.lease_generation,
            released=True,
        )
        assert (released.status, released.attempt, released.attempt_base) == (JobStatus.PENDING, 1, 1)
        assert released.attempts_used == 0
        assert released.attempt_errors == ()
        again = await acquire_job(state_adapter, job, now=now + 2 * SECOND)
        failed = await reschedule(
            state_adapter,
            job.id,
            now=now + 3 * SECOND,
            schedule=Schedule(after=timedelta(0)),
            worker_id=WORKER,
            lease_generation=again.lease_generation,
        )
        assert (failed.attempt, failed.attempt_base, failed.attempts_used) == (2, 1, 1)
        assert await get_job(state_adapter, job.id) == failed

    async def test_the_history_keeps_the_last_entries_oldest_first(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        entries: list[AttemptError] = []
        for attempt in range(1, ATTEMPT_ERRORS_KEPT + 3):
            at = now + attempt * SECOND
            running = await acquire_job(state_adapter, job, now=at)
            entry = attempt_error(running.attempt, at=at, worker_id=WORKER, message=f"attempt {attempt}")
            entries.append(entry)
            await rescheduled_with(state_adapter, running, entry, now=at)
        kept = (await get_job(state_adapter, job.id)).attempt_errors
        assert kept == tuple(entries[-ATTEMPT_ERRORS_KEPT:])
        assert [entry.attempt for entry in kept] == list(range(3, ATTEMPT_ERRORS_KEPT + 3))

    async def test_completion_keeps_the_history(self, state_adapter: StateAdapter, now: datetime) -> None:
        job = await running_job(state_adapter, now)
        entry = attempt_error(1, at=now, worker_id=WORKER)
        await rescheduled_with(state_adapter, job, entry, now=now)
        again = await acquire_job(state_adapter, job, now=now + SECOND)
        done = await complete(
            state_adapter, job.id, now=now + SECOND, worker_id=WORKER, lease_generation=again.lease_generation
        )
        assert (done.job.attempt_errors, done.job.last_attempt_error) == ((entry,), None)

    async def test_an_entry_round_trips_every_field(self, state_adapter: StateAdapter, now: datetime) -> None:
        job = await running_job(state_adapter, now)
        entry = AttemptError(
            attempt=1,
            worker_id=WORKER,
            error_type="KeyError",
            message="'missing' — ünïcode \"quoted\"\nsecond line",
            traceback='Traceback (most recent call last):\n  File "x.py", line 1\nKeyError',
            at=now + timedelta(milliseconds=250),
        )
        await rescheduled_with(state_adapter, job, entry, now=now)
        assert (await get_job(state_adapter, job.id)).attempt_errors == (entry,)

    async def test_long_messages_and_tracebacks_are_stored_cut(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running_job(state_adapter, now)
        entry = AttemptError(
            attempt=1,
            worker_id=None,
            error_type="E",
            message="m" * (MAX_ERROR_MESSAGE_CHARS * 3),
            traceback="t" * 20_000,
            at=now,
        )
        await rescheduled_with(state_adapter, job, entry, now=now)
        (stored,) = (await get_job(state_adapter, job.id)).attempt_errors
        assert len(stored.message) == MAX_ERROR_MESSAGE_CHARS
        assert stored.traceback is not None
        assert len(stored.traceback) == MAX_TRACEBACK_CHARS
        assert stored == entry

    async def test_a_reap_appends_an_abandoned_attempt(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running_job(state_adapter, now)
        late = now + LEASE + SECOND
        (reaped,) = await reap(state_adapter, now=late)
        (entry,) = reaped.attempt_errors
        message = f"attempt abandoned: the lease held by worker {WORKER} expired"
        assert (entry.attempt, entry.worker_id, entry.error_type) == (job.attempt, WORKER, "AttemptAbandoned")
        assert (entry.message, reaped.last_attempt_error) == (message, message)
        assert_time(state_adapter, entry.at, late)
        assert await get_job(state_adapter, job.id) == reaped

    async def test_a_dead_workers_release_appends_an_abandoned_attempt(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(D, now=now))
        job = await running_job(state_adapter, now, worker_id=D)
        dead_at = now + ALIVE + timedelta(seconds=5)
        result = await heartbeat(state_adapter, beat(A, now=dead_at, release_dead=True))
        (released,) = result.released_jobs
        (entry,) = released.attempt_errors
        message = f"attempt abandoned: worker {D} stopped heartbeating and was presumed dead"
        assert (entry.attempt, entry.worker_id, entry.error_type) == (job.attempt, D, "AttemptAbandoned")
        assert (entry.message, released.last_attempt_error) == (message, message)
        assert_time(state_adapter, entry.at, dead_at)
        assert await get_job(state_adapter, job.id) == released
