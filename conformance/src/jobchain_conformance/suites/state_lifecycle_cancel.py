"""chains_cancel and the fencing of cancelled jobs.

A cancel turns each chain's last job (blocked, pending or running) ``cancelled``, keeping its
history; it is all-or-nothing over the request. A cancelled job's worker is fenced: every later
write of its attempt raises ``JobCancelledError`` and changes nothing, and a cancel never waits
for an atomic attempt that holds its job with ``job_get(lock=True)``.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest

from jobchain.contracts import (
    Capability,
    CompletesJobsInBatches,
    JobComplete,
    JobFail,
    JobGet,
    JobRenewLease,
    JobReschedule,
    StateAdapter,
    StateTx,
)
from jobchain.entities import Job, JobStatus, Schedule, new_id
from jobchain.errors import JobCancelledError, JobFinishedError, LeaseLostError
from jobchain_conformance.capabilities import requires
from jobchain_conformance.helpers import (
    LEASE,
    TYPE,
    WORKER,
    acquire,
    assert_time,
    attempt_error,
    cancel,
    complete,
    continue_chain,
    fail,
    get_chain,
    get_job,
    reap,
    refused,
    start,
)
from jobchain_conformance.suites.state_lifecycle_fail import rescheduled_with, running_job

SECOND = timedelta(seconds=1)
TIMEOUT = 10.0
"""Seconds after which a cancel that should not wait is declared stuck."""


class ChainsCancelTests:
    """chains_cancel: the last job of each chain becomes cancelled; all-or-nothing refusals."""

    async def test_a_pending_chain_is_cancelled_with_the_reason(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        result = await cancel(state_adapter, [job.id], now=now + SECOND, reason="not needed")
        (cancelled,) = result.cancelled
        assert (cancelled.id, cancelled.status, cancelled.cancel_reason) == (
            job.id,
            JobStatus.CANCELLED,
            "not needed",
        )
        assert_time(state_adapter, cancelled.cancelled_at, now + SECOND)
        assert (cancelled.scheduled_at, cancelled.last_attempt_at) == (job.scheduled_at, job.last_attempt_at)
        assert (result.running_job_ids, result.previous_leased_by) == ([], {})
        assert (result.not_found, result.not_cancellable) == ([], [])
        assert await get_job(state_adapter, job.id) == cancelled
        assert (await get_chain(state_adapter, job.id)).status is JobStatus.CANCELLED

    async def test_a_blocked_chain_is_cancelled_and_its_blocker_is_untouched(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        job = await start(state_adapter, now=now, blocker_chain_ids=[blocker.id])
        result = await cancel(state_adapter, [job.id], now=now)
        assert [(j.id, j.status) for j in result.cancelled] == [(job.id, JobStatus.CANCELLED)]
        assert await get_job(state_adapter, blocker.id) == blocker

    async def test_a_running_job_is_cancelled_its_lease_cleared_and_its_worker_named(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running_job(state_adapter, now)
        result = await cancel(state_adapter, [job.id], now=now + SECOND, reason=None)
        (cancelled,) = result.cancelled
        assert (cancelled.status, cancelled.leased_by, cancelled.leased_until) == (
            JobStatus.CANCELLED,
            None,
            None,
        )
        assert (cancelled.attempt, cancelled.cancel_reason) == (job.attempt, None)
        assert (result.running_job_ids, result.previous_leased_by) == ([job.id], {job.id: WORKER})

    async def test_only_the_chains_last_job_is_cancelled(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now)
        step = await continue_chain(state_adapter, root, now=now)
        done = (await complete(state_adapter, root.id, now=now)).job
        result = await cancel(state_adapter, [root.id], now=now)
        assert [j.id for j in result.cancelled] == [step.id]
        assert await get_job(state_adapter, root.id) == done
        chain = await get_chain(state_adapter, root.id)
        assert (chain.last.id, chain.status) == (step.id, JobStatus.CANCELLED)

    async def test_several_chains_are_cancelled_at_once_and_repeats_collapse(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = await start(state_adapter, now=now)
        second = await running_job(state_adapter, now + SECOND, type_name="other")
        result = await cancel(state_adapter, [second.id, first.id, second.id], now=now)
        assert sorted(j.id for j in result.cancelled) == sorted([second.id, first.id])
        assert result.running_job_ids == [second.id]

    async def test_the_history_stays_on_a_cancelled_job(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running_job(state_adapter, now)
        entry = attempt_error(1, at=now, worker_id=WORKER)
        await rescheduled_with(state_adapter, job, entry, now=now)
        (cancelled,) = (await cancel(state_adapter, [job.id], now=now)).cancelled
        assert (cancelled.attempt, cancelled.attempt_errors, cancelled.last_attempt_error) == (
            1,
            (entry,),
            "bad",
        )

    async def test_a_cancelled_job_is_neither_claimed_nor_reaped(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        pending = await start(state_adapter, now=now)
        running = await running_job(state_adapter, now, type_name="other")
        await cancel(state_adapter, [pending.id, running.id], now=now)
        later = now + LEASE + timedelta(minutes=5)
        assert (await acquire(state_adapter, now=later, type_names=[TYPE, "other"], limit=5)).jobs == []
        assert await reap(state_adapter, now=later, type_names=[TYPE, "other"], limit=5) == []

    async def test_an_unknown_chain_refuses_the_whole_request(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)
        step_root = await start(state_adapter, now=now)
        step = await continue_chain(state_adapter, step_root, now=now)
        missing = new_id()
        result = await cancel(state_adapter, [job.id, missing, step.id], now=now)
        assert (result.cancelled, result.running_job_ids) == ([], [])
        assert sorted(result.not_found) == sorted([missing, step.id])  # a continuation's id is no chain id
        assert await get_job(state_adapter, job.id) == job

    async def test_an_empty_request_cancels_nothing(self, state_adapter: StateAdapter, now: datetime) -> None:
        job = await start(state_adapter, now=now)
        result = await cancel(state_adapter, [], now=now)
        assert (result.cancelled, result.not_found, result.not_cancellable) == ([], [], [])
        assert await get_job(state_adapter, job.id) == job

    async def test_finished_chains_refuse_the_whole_request_with_their_statuses(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        open_job = await start(state_adapter, now=now)
        done = (await complete(state_adapter, (await start(state_adapter, now=now)).id, now=now)).job
        failed = (await fail(state_adapter, (await start(state_adapter, now=now)).id, now=now)).job
        gone = await start(state_adapter, now=now)
        await cancel(state_adapter, [gone.id], now=now)
        result = await cancel(state_adapter, [open_job.id, done.id, failed.id, gone.id], now=now)
        assert result.cancelled == []
        assert sorted(result.not_cancellable) == sorted(
            [(done.id, "completed"), (failed.id, "failed"), (gone.id, "cancelled")]
        )
        assert await get_job(state_adapter, open_job.id) == open_job
        assert await get_job(state_adapter, done.id) == done


class CancelledJobFencingTests:
    """A cancelled job's attempt is fenced: its worker's writes raise JobCancelledError."""

    async def _cancelled_running(self, adapter: StateAdapter, now: datetime) -> tuple[Job, Job]:
        """(the job as its worker claimed it, the job after a cancel with reason "stop")."""
        job = await running_job(adapter, now)
        (cancelled,) = (await cancel(adapter, [job.id], now=now + SECOND, reason="stop")).cancelled
        return job, cancelled

    async def test_renewal_completion_reschedule_and_fail_of_the_worker_are_refused(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job, cancelled = await self._cancelled_running(state_adapter, now)
        generation = job.lease_generation
        later = now + 2 * SECOND
        operations = [
            lambda tx: tx.job_renew_lease(
                JobRenewLease(
                    job_id=job.id, worker_id=WORKER, lease_for=LEASE, lease_generation=generation, now=later
                )
            ),
            lambda tx: tx.job_complete(
                JobComplete(
                    job_id=job.id, output="late", worker_id=WORKER, lease_generation=generation, now=later
                )
            ),
            lambda tx: tx.job_reschedule(
                JobReschedule(
                    job_id=job.id,
                    schedule=Schedule(after=timedelta(0)),
                    error="late",
                    worker_id=WORKER,
                    lease_generation=generation,
                    now=later,
                )
            ),
            lambda tx: tx.job_fail(
                JobFail(job_id=job.id, error="late", worker_id=WORKER, lease_generation=generation, now=later)
            ),
        ]
        for op in operations:
            error = await refused(state_adapter, JobCancelledError, op)
            assert isinstance(error, LeaseLostError)
            assert (error.job_id, error.reason) == (job.id, "stop")
        assert await get_job(state_adapter, job.id) == cancelled

    async def test_a_completion_without_the_generation_is_refused_too(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job, cancelled = await self._cancelled_running(state_adapter, now)

        async def op(tx: StateTx) -> object:
            return await tx.job_complete(JobComplete(job_id=job.id, worker_id=WORKER, now=now))

        await refused(state_adapter, JobCancelledError, op)
        assert await get_job(state_adapter, job.id) == cancelled

    async def test_workerless_writes_to_a_cancelled_job_raise_finished(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job, cancelled = await self._cancelled_running(state_adapter, now)
        operations = [
            lambda tx: tx.job_complete(JobComplete(job_id=job.id, now=now)),
            lambda tx: tx.job_reschedule(
                JobReschedule(job_id=job.id, schedule=Schedule(after=timedelta(0)), error="x", now=now)
            ),
            lambda tx: tx.job_fail(JobFail(job_id=job.id, error="x", now=now)),
        ]
        for op in operations:
            error = await refused(state_adapter, JobFinishedError, op)
            assert (error.job_id, error.status) == (job.id, "cancelled")
        assert await get_job(state_adapter, job.id) == cancelled

    async def test_a_batch_completion_returns_the_refusal_in_the_cancelled_jobs_place(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job, cancelled = await self._cancelled_running(state_adapter, now)
        other = await running_job(state_adapter, now + SECOND, type_name="other")
        async with state_adapter.transaction() as tx:
            if not isinstance(tx, CompletesJobsInBatches):
                pytest.skip("the adapter does not complete jobs in batches")
            results = await tx.jobs_complete(
                [
                    JobComplete(
                        job_id=job.id, worker_id=WORKER, lease_generation=job.lease_generation, now=now
                    ),
                    JobComplete(
                        job_id=other.id, worker_id=WORKER, lease_generation=other.lease_generation, now=now
                    ),
                ]
            )
        refusal, done = results
        assert isinstance(refusal, JobCancelledError)
        assert refusal.job_id == job.id
        assert not isinstance(done, Exception)
        assert done.job.status is JobStatus.COMPLETED
        assert await get_job(state_adapter, job.id) == cancelled

    @requires(Capability.CONCURRENT_TRANSACTIONS, Capability.ROW_LOCKS)
    async def test_a_cancel_does_not_wait_for_an_attempt_holding_its_job(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running_job(state_adapter, now)
        late_write: BaseException | None = None
        try:
            async with state_adapter.transaction() as holder:  # an atomic attempt's transaction
                assert await holder.job_get(JobGet(job_id=job.id, lock=True)) == job
                result = await asyncio.wait_for(
                    cancel(state_adapter, [job.id], now=now, reason="stop"), TIMEOUT
                )
                assert result.running_job_ids == [job.id]
                try:
                    await holder.job_complete(
                        JobComplete(
                            job_id=job.id, worker_id=WORKER, lease_generation=job.lease_generation, now=now
                        )
                    )
                except JobCancelledError as error:
                    late_write = error
        except Exception:
            if late_write is None or Capability.POISONABLE_TRANSACTIONS not in state_adapter.capabilities:
                raise
        assert isinstance(late_write, JobCancelledError), "the holder's late completion went through"
        assert (await get_job(state_adapter, job.id)).status is JobStatus.CANCELLED
