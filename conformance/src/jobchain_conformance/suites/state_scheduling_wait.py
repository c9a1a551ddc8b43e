"""Dynamic blockers (``job_wait``): a running job waits for chains; its attempt ends without
failing or using its budget; it is blocked until they end, then runs again.

Fencing is that of a worker's reschedule; an unknown chain or the job's own chain refuses the
wait and changes nothing. Without ``runs_after_failed`` a waited-for chain that fails (or has
already failed) fails the job as propagation does; with it, any end resolves the wait.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import pytest

from jobchain.contracts import StateAdapter, StateTx
from jobchain.contracts.scheduling import JobWait
from jobchain.entities import Job, JobStatus
from jobchain.errors import (
    ChainNotFoundError,
    InvalidArgumentError,
    JobAlreadyCompletedError,
    JobCancelledError,
    JobchainError,
    JobNotFoundError,
    JobTakenByAnotherWorkerError,
)
from jobchain_conformance.helpers import (
    OTHER_WORKER,
    WORKER,
    acquire,
    acquire_job,
    assert_time,
    blockers_of,
    cancel,
    complete,
    fail,
    get_job,
    ids,
    refused,
    run_and_complete,
    start,
    wait_for,
)
from jobchain_conformance.suites.state_lifecycle_propagation import assert_failed_by

SECOND = timedelta(seconds=1)


MISSING = "00000000-0000-7000-8000-000000000000"


async def running(adapter: StateAdapter, now: datetime) -> Job:
    """A new job of the default type claimed by ``WORKER`` at ``now`` (the only due one)."""
    return await acquire_job(adapter, await start(adapter, now=now), now=now)


def waiting(
    job_id: str,
    chain_ids: list[str],
    *,
    now: datetime,
    worker_id: str = WORKER,
    lease_generation: int | None = None,
) -> Callable[[StateTx], Awaitable[object]]:
    """The ``job_wait`` operation, for :func:`refused`."""
    params = JobWait(
        job_id=job_id,
        worker_id=worker_id,
        blocker_chain_ids=chain_ids,
        lease_generation=lease_generation,
        now=now,
    )
    return lambda tx: tx.job_wait(params)


class JobWaitTests:
    """A running job waits for chains, then runs again with its budget untouched."""

    async def test_the_job_is_blocked_with_its_lease_cleared_and_no_attempt_used(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running(state_adapter, now)
        child = await start(state_adapter, now=now, type_name="child")
        waited = await wait_for(
            state_adapter, job.id, [child.id], now=now + SECOND, lease_generation=job.lease_generation
        )
        assert waited.incomplete_blocker_chain_ids == (child.id,)
        stored = await get_job(state_adapter, job.id)
        assert waited.job.status is stored.status is JobStatus.BLOCKED
        assert (stored.leased_by, stored.leased_until) == (None, None)
        assert (stored.attempt, stored.attempts_used) == (1, 0)
        assert_time(state_adapter, stored.last_attempt_at, now + SECOND)
        assert (stored.failed_at, stored.failed_by_chain_id) == (None, None)
        assert [chain.id for chain in await blockers_of(state_adapter, job.id)] == [child.id]
        assert (await acquire(state_adapter, now=now + 2 * SECOND)).jobs == []

    async def test_the_job_runs_again_once_every_waited_chain_ends(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running(state_adapter, now)
        first = await start(state_adapter, now=now, type_name="child")
        second = await start(state_adapter, now=now, type_name="child")
        await wait_for(state_adapter, job.id, [first.id, second.id], now=now)
        assert ids((await complete(state_adapter, first.id, now=now + SECOND)).unblocked_jobs) == []
        later = now + 2 * SECOND
        assert ids((await complete(state_adapter, second.id, now=later, output=7)).unblocked_jobs) == [job.id]
        pending = await get_job(state_adapter, job.id)
        assert pending.status is JobStatus.PENDING
        assert_time(state_adapter, pending.scheduled_at, later)
        again = await acquire_job(state_adapter, pending, now=later)
        assert (again.attempt, again.attempts_used) == (2, 1)
        outputs = [chain.output for chain in await blockers_of(state_adapter, job.id)]
        assert outputs == [None, 7]

    async def test_waited_chains_come_after_declared_ones_and_none_is_added_twice(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        declared = await start(state_adapter, now=now, type_name="declared")
        job = await start(state_adapter, now=now, blocker_chain_ids=[declared.id])
        await run_and_complete(state_adapter, declared, now=now)
        running_job = await acquire_job(state_adapter, job, now=now)
        child = await start(state_adapter, now=now, type_name="child")
        waited = await wait_for(
            state_adapter,
            job.id,
            [declared.id, child.id, child.id],
            now=now,
            lease_generation=running_job.lease_generation,
        )
        assert waited.incomplete_blocker_chain_ids == (child.id,)
        assert [chain.id for chain in await blockers_of(state_adapter, job.id)] == [declared.id, child.id]

    async def test_chains_that_already_ended_leave_the_job_pending_now(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running(state_adapter, now)
        done = await start(state_adapter, now=now, type_name="child")
        await complete(state_adapter, done.id, now=now)
        waited = await wait_for(state_adapter, job.id, [done.id], now=now + SECOND)
        assert (waited.job.status, waited.incomplete_blocker_chain_ids) == (JobStatus.PENDING, ())
        assert_time(state_adapter, waited.job.scheduled_at, now + SECOND)
        again = await acquire_job(state_adapter, waited.job, now=now + SECOND)
        assert (again.attempt, again.attempts_used) == (2, 1)

    async def test_a_waited_chain_that_fails_fails_the_job_as_propagation(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running(state_adapter, now)
        child = await start(state_adapter, now=now, type_name="child")
        dependent = await start(state_adapter, now=now, type_name="dependent", blocker_chain_ids=[job.id])
        await wait_for(state_adapter, job.id, [child.id], now=now)
        failed = await fail(state_adapter, child.id, now=now + SECOND)
        assert sorted(ids(failed.failed_jobs)) == sorted([job.id, dependent.id])
        stored = await get_job(state_adapter, job.id)
        assert_failed_by(state_adapter, stored, child, now + SECOND)
        assert stored.attempts_used == 0

    async def test_with_runs_after_failed_a_failed_or_cancelled_chain_resolves_the_wait(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running(state_adapter, now)
        failing = await start(state_adapter, now=now, type_name="child")
        cancelled = await start(state_adapter, now=now, type_name="child")
        await wait_for(state_adapter, job.id, [failing.id, cancelled.id], now=now, runs_after_failed=True)
        assert ids((await fail(state_adapter, failing.id, now=now + SECOND)).unblocked_jobs) == []
        result = await cancel(state_adapter, [cancelled.id], now=now + 2 * SECOND)
        assert (ids(result.unblocked_jobs), result.failed_jobs) == ([job.id], [])
        assert (await get_job(state_adapter, job.id)).status is JobStatus.PENDING

    @pytest.mark.parametrize("how", ["failed", "cancelled"])
    async def test_a_chain_that_already_failed_fails_the_job_at_once_and_propagates(
        self, state_adapter: StateAdapter, now: datetime, how: str
    ) -> None:
        job = await running(state_adapter, now)
        child = await start(state_adapter, now=now, type_name="child")
        if how == "failed":
            await fail(state_adapter, child.id, now=now)
        else:
            await cancel(state_adapter, [child.id], now=now)
        dependent = await start(state_adapter, now=now, type_name="dependent", blocker_chain_ids=[job.id])
        later = now + SECOND
        waited = await wait_for(state_adapter, job.id, [child.id], now=later)
        assert waited.job.status is JobStatus.FAILED
        assert dependent.id in ids(waited.failed_jobs)
        stored = await get_job(state_adapter, job.id)
        assert_failed_by(state_adapter, stored, child, later, cancelled=how == "cancelled")
        assert (stored.leased_by, stored.attempts_used) == (None, 0)
        assert (await get_job(state_adapter, dependent.id)).failed_by_chain_id == job.id

    async def test_with_runs_after_failed_an_already_failed_chain_leaves_the_job_pending(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running(state_adapter, now)
        child = await start(state_adapter, now=now, type_name="child")
        await fail(state_adapter, child.id, now=now)
        waited = await wait_for(state_adapter, job.id, [child.id], now=now + SECOND, runs_after_failed=True)
        assert (waited.job.status, waited.failed_jobs) == (JobStatus.PENDING, [])


class JobWaitRefusalTests:
    """Fencing, unknown chains and the job's own chain: refused, nothing changes."""

    @pytest.mark.parametrize(
        "case", ["missing", "other_worker", "stale_generation", "cancelled", "completed"]
    )
    async def test_fencing_refuses_the_wait_and_changes_nothing(
        self, state_adapter: StateAdapter, now: datetime, case: str
    ) -> None:
        job = await running(state_adapter, now)
        child = await start(state_adapter, now=now, type_name="child")
        later, generation = now + SECOND, job.lease_generation
        expected: type[JobchainError]
        op = waiting(job.id, [child.id], now=later, lease_generation=generation)
        if case == "missing":
            op, expected = waiting(MISSING, [child.id], now=later), JobNotFoundError
        elif case == "other_worker":
            op = waiting(job.id, [child.id], now=later, worker_id=OTHER_WORKER, lease_generation=generation)
            expected = JobTakenByAnotherWorkerError
        elif case == "stale_generation":
            op = waiting(job.id, [child.id], now=later, lease_generation=generation - 1)
            expected = JobTakenByAnotherWorkerError
        elif case == "cancelled":
            await cancel(state_adapter, [job.id], now=now)
            expected = JobCancelledError
        else:
            await complete(state_adapter, job.id, now=now, worker_id=WORKER, lease_generation=generation)
            expected = JobAlreadyCompletedError
        before = await get_job(state_adapter, job.id)
        await refused(state_adapter, expected, op)
        assert await get_job(state_adapter, job.id) == before
        assert await blockers_of(state_adapter, job.id) == []

    async def test_an_unknown_chain_refuses_the_wait_and_changes_nothing(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running(state_adapter, now)
        child = await start(state_adapter, now=now, type_name="child")
        unknown = MISSING
        op = waiting(job.id, [child.id, unknown], now=now, lease_generation=job.lease_generation)
        assert (await refused(state_adapter, ChainNotFoundError, op)).chain_id == unknown
        assert await get_job(state_adapter, job.id) == job
        assert await blockers_of(state_adapter, job.id) == []

    async def test_the_jobs_own_chain_refuses_the_wait_and_changes_nothing(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running(state_adapter, now)
        child = await start(state_adapter, now=now, type_name="child")
        op = waiting(job.id, [child.id, job.chain_id], now=now, lease_generation=job.lease_generation)
        await refused(state_adapter, InvalidArgumentError, op)
        assert await get_job(state_adapter, job.id) == job
        assert await blockers_of(state_adapter, job.id) == []

    @pytest.mark.parametrize("chain_ids", [[], "a-chain-id"])
    def test_a_wait_needs_a_non_empty_list_of_chains(self, chain_ids: object) -> None:
        with pytest.raises(InvalidArgumentError):
            JobWait(job_id="j", worker_id=WORKER, blocker_chain_ids=chain_ids)  # type: ignore[arg-type]
