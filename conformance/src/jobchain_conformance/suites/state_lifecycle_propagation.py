"""Propagation: what a failed or cancelled chain does to the jobs it blocks, down the whole graph.

By default a blocked dependent fails with it, naming the blocker chain, and its own chain failing
propagates in turn, in the same operation. A job created with ``runs_after_failed_blockers``
instead becomes pending once every blocker chain is terminal, whatever their statuses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta

from jobchain.contracts import Capability, JobFail, JobsCreate, StateAdapter
from jobchain.entities import Deduplication, Job, JobStatus, Schedule
from jobchain_conformance.capabilities import requires
from jobchain_conformance.helpers import (
    assert_time,
    cancel,
    complete,
    continue_chain,
    create_one,
    fail,
    get_chain,
    get_job,
    new_job,
    start,
)

SECOND = timedelta(seconds=1)
TIMEOUT = 10.0
GRACE = 0.2
"""Seconds a second transaction is given to reach its wait (a correct adapter passes whatever it is)."""


def failed_message(blocker: Job, *, cancelled: bool = False) -> str:
    """The ``last_attempt_error`` of a job failed by ``blocker``'s chain (part of the contract)."""
    what = "was cancelled" if cancelled else "failed"
    return f"blocker chain {blocker.chain_id} ({blocker.chain_type_name}) {what}"


def assert_failed_by(
    adapter: StateAdapter, job: Job, blocker: Job, at: datetime, *, cancelled: bool = False
) -> None:
    """``job`` (as stored) failed because ``blocker``'s chain failed (or was cancelled) at ``at``."""
    message = failed_message(blocker, cancelled=cancelled)
    assert (job.status, job.failed_by_chain_id, job.last_attempt_error) == (
        JobStatus.FAILED,
        blocker.chain_id,
        message,
    )
    assert_time(adapter, job.failed_at, at)
    entry = job.attempt_errors[-1]
    error_type = "BlockerChainCancelled" if cancelled else "BlockerChainFailed"
    assert (entry.error_type, entry.worker_id, entry.attempt, entry.message) == (
        error_type,
        None,
        job.attempt,
        message,
    )
    assert_time(adapter, entry.at, at)


def by_id(jobs: Sequence[Job]) -> dict[str, Job]:
    return {job.id: job for job in jobs}


async def dependent(
    adapter: StateAdapter, now: datetime, *blockers: Job, type_name: str = "dependent", opt_in: bool = False
) -> Job:
    """A new chain blocked by the chains of ``blockers``."""
    return await start(
        adapter,
        now=now,
        type_name=type_name,
        blocker_chain_ids=[blocker.chain_id for blocker in blockers],
        runs_after_failed_blockers=opt_in,
    )


class PropagationTests:
    """A chain that fails or is cancelled fails its blocked dependents (default policy)."""

    async def test_a_failed_chain_fails_its_blocked_dependent_naming_it(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        job = await dependent(state_adapter, now, blocker)
        at = now + SECOND
        result = await fail(state_adapter, blocker.id, now=at)
        stored = await get_job(state_adapter, job.id)
        assert_failed_by(state_adapter, stored, blocker, at)
        assert (stored.scheduled_at, stored.attempt, stored.last_attempt_at) == (job.scheduled_at, 0, None)
        assert result.failed_jobs == [stored]
        assert result.unblocked_jobs == []
        assert (await get_chain(state_adapter, job.id)).status is JobStatus.FAILED

    async def test_a_cancelled_chain_fails_its_blocked_dependent_naming_it(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        job = await dependent(state_adapter, now, blocker)
        at = now + SECOND
        result = await cancel(state_adapter, [blocker.id], now=at, reason="stop")
        stored = await get_job(state_adapter, job.id)
        assert_failed_by(state_adapter, stored, blocker, at, cancelled=True)
        assert (stored.cancelled_at, stored.cancel_reason) == (None, None)
        assert result.failed_jobs == [stored]

    async def test_failure_propagates_several_levels_deep_in_one_operation(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = await start(state_adapter, now=now, type_name="first")
        second = await dependent(state_adapter, now, first, type_name="second")
        third = await dependent(state_adapter, now, second, type_name="third")
        fourth = await dependent(state_adapter, now, third, second, type_name="fourth")
        at = now + SECOND
        result = await fail(state_adapter, first.id, now=at)
        stored = {job.id: await get_job(state_adapter, job.id) for job in (second, third, fourth)}
        assert by_id(result.failed_jobs) == stored
        assert_failed_by(state_adapter, stored[second.id], first, at)
        assert_failed_by(state_adapter, stored[third.id], second, at)
        # Reached through second first, but named after its first declared blocker that ended.
        assert_failed_by(state_adapter, stored[fourth.id], third, at)

    async def test_a_blocked_continuation_fails_and_its_chain_propagates(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        root = await start(state_adapter, now=now, type_name="root")
        step = await continue_chain(state_adapter, root, now=now, blocker_chain_ids=[blocker.id])
        await complete(state_adapter, root.id, now=now)
        downstream = await dependent(state_adapter, now, root)
        result = await fail(state_adapter, blocker.id, now=now)
        assert set(by_id(result.failed_jobs)) == {step.id, downstream.id}
        assert (await get_chain(state_adapter, root.id)).status is JobStatus.FAILED
        assert_failed_by(state_adapter, await get_job(state_adapter, downstream.id), step, now)

    async def test_several_blockers_ending_at_once_name_the_first_declared(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = await start(state_adapter, now=now, type_name="first")
        second = await start(state_adapter, now=now, type_name="second")
        job = await dependent(state_adapter, now, second, first)
        result = await cancel(state_adapter, [first.id, second.id], now=now)
        stored = await get_job(state_adapter, job.id)
        assert_failed_by(state_adapter, stored, second, now, cancelled=True)
        assert result.failed_jobs == [stored]

    async def test_one_failed_blocker_is_enough_and_the_others_are_untouched(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        good = await start(state_adapter, now=now, type_name="good")
        bad = await start(state_adapter, now=now, type_name="bad")
        job = await dependent(state_adapter, now, good, bad)
        await fail(state_adapter, bad.id, now=now)
        assert_failed_by(state_adapter, await get_job(state_adapter, job.id), bad, now)
        assert await get_job(state_adapter, good.id) == good

    async def test_a_completed_blocker_then_a_failed_one_still_fails_the_dependent(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        good = await start(state_adapter, now=now, type_name="good")
        bad = await start(state_adapter, now=now, type_name="bad")
        job = await dependent(state_adapter, now, good, bad)
        completed = await complete(state_adapter, good.id, now=now)
        assert completed.unblocked_jobs == []
        assert (await get_job(state_adapter, job.id)).status is JobStatus.BLOCKED
        await fail(state_adapter, bad.id, now=now)
        assert (await get_job(state_adapter, job.id)).status is JobStatus.FAILED

    async def test_finished_dependents_stay_finished_when_their_other_blocker_completes(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        good = await start(state_adapter, now=now, type_name="good")
        bad = await start(state_adapter, now=now, type_name="bad")
        failed = await dependent(state_adapter, now, good, bad, type_name="failed")
        cancelled = await dependent(state_adapter, now, good, type_name="cancelled")
        await fail(state_adapter, bad.id, now=now)
        await cancel(state_adapter, [cancelled.id], now=now)
        before = [await get_job(state_adapter, job.id) for job in (failed, cancelled)]
        completed = await complete(state_adapter, good.id, now=now + SECOND)
        assert completed.unblocked_jobs == []
        assert [await get_job(state_adapter, job.id) for job in (failed, cancelled)] == before

    async def test_a_job_created_against_a_failed_blocker_is_failed_at_once(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        failed = (await fail(state_adapter, blocker.id, now=now)).job
        at = now + SECOND
        created = await create_one(
            state_adapter, new_job(type_name="late", blocker_chain_ids=[blocker.id]), now=at
        )
        assert_failed_by(state_adapter, created.job, failed, at)
        assert created.incomplete_blocker_chain_ids == ()
        assert await get_job(state_adapter, created.job.id) == created.job

    async def test_a_job_created_against_a_cancelled_blocker_is_failed_at_once(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        (cancelled,) = (await cancel(state_adapter, [blocker.id], now=now)).cancelled
        created = await create_one(
            state_adapter, new_job(type_name="late", blocker_chain_ids=[blocker.id]), now=now
        )
        assert_failed_by(state_adapter, created.job, cancelled, now, cancelled=True)


class OptInPropagationTests:
    """``runs_after_failed_blockers``: the job runs once every blocker chain is terminal."""

    async def test_the_flag_is_stored_on_the_job(self, state_adapter: StateAdapter, now: datetime) -> None:
        plain = await start(state_adapter, now=now)
        opted = await start(state_adapter, now=now, runs_after_failed_blockers=True)
        assert (plain.runs_after_failed_blockers, opted.runs_after_failed_blockers) == (False, True)
        assert (await get_job(state_adapter, opted.id)).runs_after_failed_blockers is True

    async def test_a_failed_blocker_makes_an_opted_in_dependent_pending(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        job = await dependent(state_adapter, now, blocker, opt_in=True)
        at = now + SECOND
        result = await fail(state_adapter, blocker.id, now=at)
        stored = await get_job(state_adapter, job.id)
        assert (stored.status, stored.failed_by_chain_id, stored.attempt_errors) == (
            JobStatus.PENDING,
            None,
            (),
        )
        assert_time(state_adapter, stored.scheduled_at, at)
        assert (result.failed_jobs, result.unblocked_jobs) == ([], [stored])

    async def test_a_cancelled_blocker_makes_an_opted_in_dependent_pending(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        job = await dependent(state_adapter, now, blocker, opt_in=True)
        result = await cancel(state_adapter, [blocker.id], now=now)
        stored = await get_job(state_adapter, job.id)
        assert stored.status is JobStatus.PENDING
        assert (result.failed_jobs, result.unblocked_jobs) == ([], [stored])

    async def test_a_later_schedule_is_kept_when_unblocked(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        job = await start(
            state_adapter,
            now=now,
            blocker_chain_ids=[blocker.id],
            runs_after_failed_blockers=True,
            schedule=Schedule(after=timedelta(hours=1)),
        )
        await fail(state_adapter, blocker.id, now=now + SECOND)
        assert_time(
            state_adapter, (await get_job(state_adapter, job.id)).scheduled_at, now + timedelta(hours=1)
        )

    async def test_an_opted_in_job_waits_for_every_blocker_then_completion_unblocks_it(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        bad = await start(state_adapter, now=now, type_name="bad")
        slow = await start(state_adapter, now=now, type_name="slow")
        job = await dependent(state_adapter, now, bad, slow, opt_in=True)
        result = await fail(state_adapter, bad.id, now=now)
        assert result.unblocked_jobs == []
        assert (await get_job(state_adapter, job.id)).status is JobStatus.BLOCKED
        completed = await complete(state_adapter, slow.id, now=now + SECOND)
        stored = await get_job(state_adapter, job.id)
        assert stored.status is JobStatus.PENDING
        assert completed.unblocked_jobs == [stored]

    async def test_the_last_of_several_failed_blockers_unblocks_an_opted_in_job(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = await start(state_adapter, now=now, type_name="first")
        second = await start(state_adapter, now=now, type_name="second")
        job = await dependent(state_adapter, now, first, second, opt_in=True)
        await cancel(state_adapter, [first.id], now=now)
        assert (await get_job(state_adapter, job.id)).status is JobStatus.BLOCKED
        result = await fail(state_adapter, second.id, now=now)
        assert [j.id for j in result.unblocked_jobs] == [job.id]

    async def test_propagation_reaches_an_opted_in_job_further_down(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = await start(state_adapter, now=now, type_name="first")
        second = await dependent(state_adapter, now, first, type_name="second")
        third = await dependent(state_adapter, now, second, type_name="third", opt_in=True)
        fourth = await dependent(state_adapter, now, third, type_name="fourth")
        result = await fail(state_adapter, first.id, now=now)
        assert [j.id for j in result.failed_jobs] == [second.id]
        assert [j.id for j in result.unblocked_jobs] == [third.id]
        assert (await get_job(state_adapter, fourth.id)).status is JobStatus.BLOCKED

    async def test_an_opted_in_job_created_against_finished_blockers(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        bad = await start(state_adapter, now=now, type_name="bad")
        await fail(state_adapter, bad.id, now=now)
        done = await start(state_adapter, now=now, type_name="done")
        await complete(state_adapter, done.id, now=now)
        open_chain = await start(state_adapter, now=now, type_name="open")
        ready = await dependent(state_adapter, now, bad, done, opt_in=True)
        waiting = await create_one(
            state_adapter,
            new_job(blocker_chain_ids=[bad.id, open_chain.id], runs_after_failed_blockers=True),
            now=now,
        )
        assert ready.status is JobStatus.PENDING
        assert waiting.job.status is JobStatus.BLOCKED
        assert waiting.incomplete_blocker_chain_ids == (open_chain.id,)


class TerminalDeduplicationTests:
    """Deduplication scope ``incomplete``: a failed or cancelled chain frees its key."""

    async def _again(self, adapter: StateAdapter, now: datetime, key: str) -> tuple[Job, bool]:
        created = await create_one(adapter, new_job(deduplication=Deduplication(key=key)), now=now)
        return created.job, created.deduplicated

    async def test_a_failed_chain_frees_its_key(self, state_adapter: StateAdapter, now: datetime) -> None:
        first, _ = await self._again(state_adapter, now, "k")
        assert (await self._again(state_adapter, now, "k")) == (first, True)
        await fail(state_adapter, first.id, now=now)
        second, deduplicated = await self._again(state_adapter, now + SECOND, "k")
        assert (deduplicated, second.id != first.id, second.status) == (False, True, JobStatus.PENDING)

    async def test_a_cancelled_chain_frees_its_key(self, state_adapter: StateAdapter, now: datetime) -> None:
        first, _ = await self._again(state_adapter, now, "k")
        await cancel(state_adapter, [first.id], now=now)
        second, deduplicated = await self._again(state_adapter, now + SECOND, "k")
        assert (deduplicated, second.id != first.id) == (False, True)

    async def test_scope_any_still_matches_a_failed_chain(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        dedup = Deduplication(key="k", scope="any", window=timedelta(hours=1))
        first = (await create_one(state_adapter, new_job(deduplication=dedup), now=now)).job
        await fail(state_adapter, first.id, now=now)
        again = await create_one(state_adapter, new_job(deduplication=dedup), now=now + SECOND)
        assert (again.deduplicated, again.job.id) == (True, first.id)


class ConcurrentPropagationTests:
    """A dependent inserted while its blocker fails in another transaction is never left blocked."""

    @requires(Capability.CONCURRENT_TRANSACTIONS)
    async def test_a_failure_waits_for_an_uncommitted_dependent_and_fails_it(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        job = new_job(blocker_chain_ids=[blocker.id])
        async with state_adapter.transaction() as inserting:
            (created,) = await inserting.jobs_create(JobsCreate(jobs=[job], now=now))
            assert created.job.status is JobStatus.BLOCKED
            failing = asyncio.create_task(fail(state_adapter, blocker.id, now=now))
            await asyncio.wait({failing}, timeout=GRACE)
        result = await asyncio.wait_for(failing, TIMEOUT)
        stored = await get_job(state_adapter, job.id)
        assert stored.status is JobStatus.FAILED, "the dependent was left blocked by a failed chain"
        assert [j.id for j in result.failed_jobs] == [job.id]

    @requires(Capability.CONCURRENT_TRANSACTIONS)
    async def test_an_insert_waits_for_an_uncommitted_failure_and_fails_at_once(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        job = new_job(blocker_chain_ids=[blocker.id])
        async with state_adapter.transaction() as failing:
            await failing.job_fail(JobFail(job_id=blocker.id, error="gave up", now=now))
            inserting = asyncio.create_task(create_one(state_adapter, job, now=now))
            await asyncio.wait({inserting}, timeout=GRACE)
        created = await asyncio.wait_for(inserting, TIMEOUT)
        assert created.job.status is JobStatus.FAILED, "the dependent was left blocked by a failed chain"
        assert await get_job(state_adapter, job.id) == created.job
