"""chains_prune (retention) and listing by the new statuses and by error type (dead letters).

A prune deletes up to ``limit`` chains that finished before the cutoff for their status, oldest
first, never one that blocks a job it does not delete, and only one caller prunes at a time.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest

from jobchain.contracts import (
    BlockedJobsList,
    Capability,
    ChainsList,
    ChainsPrune,
    JobsList,
    PrunedChain,
    StateAdapter,
)
from jobchain.entities import Job
from jobchain.errors import InvalidArgumentError
from jobchain_conformance.capabilities import requires
from jobchain_conformance.helpers import (
    attempt_error,
    cancel,
    complete,
    continue_chain,
    fail,
    find_job,
    ids,
    prune,
    retry,
    start,
)
from jobchain_conformance.suites.state_lifecycle_fail import rescheduled_with, running_job
from jobchain_conformance.suites.state_lifecycle_propagation import dependent

SECOND = timedelta(seconds=1)
TIMEOUT = 10.0


async def finished(adapter: StateAdapter, at: datetime, status: str, *, type_name: str = "t") -> Job:
    """A chain of one job that reached ``status`` (completed, failed or cancelled) at ``at``."""
    job = await start(adapter, now=at, type_name=type_name)
    if status == "completed":
        return (await complete(adapter, job.id, now=at)).job
    if status == "failed":
        return (await fail(adapter, job.id, now=at)).job
    return (await cancel(adapter, [job.id], now=at)).cancelled[0]


async def present(adapter: StateAdapter, *jobs: Job) -> list[bool]:
    return [await find_job(adapter, job.id) is not None for job in jobs]


def pruned(job: Job, status: str) -> PrunedChain:
    return PrunedChain(id=job.chain_id, type_name=job.chain_type_name, status=status)


class ChainsPruneTests:
    """chains_prune: per-status cutoffs, oldest first, bounded, blocker references respected."""

    async def test_chains_finished_before_their_statuss_cutoff_are_deleted(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        old_done = await finished(state_adapter, now, "completed", type_name="done")
        old_failed = await finished(state_adapter, now + SECOND, "failed", type_name="bad")
        old_cancelled = await finished(state_adapter, now + 2 * SECOND, "cancelled", type_name="gone")
        cutoff = now + timedelta(minutes=1)
        recent = [
            await finished(state_adapter, cutoff, status) for status in ("completed", "failed", "cancelled")
        ]
        result = await prune(
            state_adapter, ChainsPrune(completed_before=cutoff, failed_before=cutoff, cancelled_before=cutoff)
        )
        assert result.busy is False
        assert result.chains == [
            pruned(old_done, "completed"),
            pruned(old_failed, "failed"),
            pruned(old_cancelled, "cancelled"),
        ]
        assert await present(state_adapter, old_done, old_failed, old_cancelled) == [False, False, False]
        assert await present(state_adapter, *recent) == [True, True, True]

    async def test_a_status_without_a_cutoff_is_kept(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        done = await finished(state_adapter, now, "completed")
        failed = await finished(state_adapter, now, "failed")
        cancelled = await finished(state_adapter, now, "cancelled")
        later = now + timedelta(days=30)
        result = await prune(state_adapter, ChainsPrune(completed_before=later))
        assert [chain.id for chain in result.chains] == [done.id]
        assert await present(state_adapter, failed, cancelled) == [True, True]
        assert (await prune(state_adapter, ChainsPrune())).chains == []

    async def test_unfinished_chains_are_never_pruned(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        pending = await start(state_adapter, now=now, type_name="pending")
        running = await running_job(state_adapter, now, type_name="running")
        blocked = await dependent(state_adapter, now, pending, type_name="blocked")
        root = await start(state_adapter, now=now, type_name="root")
        step = await continue_chain(state_adapter, root, now=now)
        await complete(state_adapter, root.id, now=now)
        far = now + timedelta(days=365)
        result = await prune(
            state_adapter, ChainsPrune(completed_before=far, failed_before=far, cancelled_before=far)
        )
        assert result.chains == []
        assert await present(state_adapter, pending, running, blocked, root, step) == [True] * 5

    async def test_the_oldest_go_first_up_to_the_limit(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        newest = await finished(state_adapter, now + 2 * SECOND, "completed")
        oldest = await finished(state_adapter, now, "failed")
        middle = await finished(state_adapter, now + SECOND, "completed")
        cutoff = now + timedelta(minutes=1)
        params = ChainsPrune(completed_before=cutoff, failed_before=cutoff, limit=2)
        assert [chain.id for chain in (await prune(state_adapter, params)).chains] == [oldest.id, middle.id]
        assert [chain.id for chain in (await prune(state_adapter, params)).chains] == [newest.id]
        assert (await prune(state_adapter, params)).chains == []

    async def test_every_job_of_a_pruned_chain_goes(self, state_adapter: StateAdapter, now: datetime) -> None:
        root = await start(state_adapter, now=now)
        step = await continue_chain(state_adapter, root, now=now)
        await complete(state_adapter, root.id, now=now)
        await complete(state_adapter, step.id, now=now)
        result = await prune(state_adapter, ChainsPrune(completed_before=now + SECOND))
        assert [chain.id for chain in result.chains] == [root.id]
        assert await present(state_adapter, root, step) == [False, False]

    async def test_a_chain_blocking_a_live_job_is_kept_and_does_not_crowd_out_others(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await finished(state_adapter, now, "completed", type_name="blocker")
        other = await start(state_adapter, now=now, type_name="other")
        live = await dependent(state_adapter, now, blocker, other)
        free = await finished(state_adapter, now + SECOND, "completed", type_name="free")
        result = await prune(state_adapter, ChainsPrune(completed_before=now + timedelta(minutes=1), limit=1))
        assert [chain.id for chain in result.chains] == [free.id]
        assert await present(state_adapter, blocker, live) == [True, True]

    async def test_a_blocker_goes_together_with_its_finished_dependents(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        job = await dependent(state_adapter, now, blocker)
        await fail(state_adapter, blocker.id, now=now)  # the dependent fails with it
        cutoff = now + SECOND
        result = await prune(state_adapter, ChainsPrune(failed_before=cutoff))
        assert sorted(chain.id for chain in result.chains) == sorted([blocker.id, job.id])
        assert await present(state_adapter, blocker, job) == [False, False]
        async with state_adapter.transaction(read_only=True) as tx:
            page = await tx.blocked_jobs_list(BlockedJobsList(blocker_chain_id=blocker.id))
        assert page.items == []

    async def test_a_blocker_whose_dependent_misses_the_batch_is_kept_for_later(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        job = await dependent(state_adapter, now, blocker)
        await complete(state_adapter, blocker.id, now=now)
        await complete(state_adapter, job.id, now=now + SECOND)
        cutoff = now + timedelta(minutes=1)
        first = await prune(state_adapter, ChainsPrune(completed_before=cutoff, limit=1))
        assert first.chains == []
        assert await present(state_adapter, blocker, job) == [True, True]
        second = await prune(state_adapter, ChainsPrune(completed_before=cutoff, limit=2))
        assert sorted(chain.id for chain in second.chains) == sorted([blocker.id, job.id])

    async def test_a_retried_chain_no_longer_counts_as_failed(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        failed = await finished(state_adapter, now, "failed")
        await retry(state_adapter, [failed.id], now=now)
        result = await prune(state_adapter, ChainsPrune(failed_before=now + timedelta(days=1)))
        assert result.chains == []

    @pytest.mark.parametrize("limit", [0, -1, True, 2.5])
    def test_a_bad_limit_is_refused(self, limit: object) -> None:
        with pytest.raises(InvalidArgumentError, match="limit"):
            ChainsPrune(limit=limit)  # type: ignore[arg-type]

    @requires(Capability.CONCURRENT_TRANSACTIONS)
    async def test_a_second_prune_while_one_runs_returns_busy_and_deletes_nothing(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = await finished(state_adapter, now, "completed")
        second = await finished(state_adapter, now + SECOND, "completed")
        cutoff = now + timedelta(minutes=1)
        async with state_adapter.transaction() as holder:
            held = await holder.chains_prune(ChainsPrune(completed_before=cutoff, limit=1))
            assert [chain.id for chain in held.chains] == [first.id]
            other = await asyncio.wait_for(
                prune(state_adapter, ChainsPrune(completed_before=cutoff)), TIMEOUT
            )
            assert (other.busy, other.chains) == (True, [])
        assert await present(state_adapter, second) == [True]
        after = await prune(state_adapter, ChainsPrune(completed_before=cutoff))
        assert (after.busy, [chain.id for chain in after.chains]) == (False, [second.id])


class DeadLetterListingTests:
    """jobs_list / chains_list by the new statuses; dead letters by error type, paginated."""

    async def test_jobs_and_chains_filter_by_failed_and_cancelled(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        failed = await finished(state_adapter, now, "failed")
        cancelled = await finished(state_adapter, now + SECOND, "cancelled")
        await finished(state_adapter, now + 2 * SECOND, "completed")
        await start(state_adapter, now=now + 3 * SECOND)
        async with state_adapter.transaction(read_only=True) as tx:
            jobs_failed = await tx.jobs_list(JobsList(statuses=["failed"]))
            jobs_both = await tx.jobs_list(JobsList(statuses=["failed", "cancelled"], order="asc"))
            chains_cancelled = await tx.chains_list(ChainsList(statuses=["cancelled"]))
        assert ids(jobs_failed.items) == [failed.id]
        assert ids(jobs_both.items) == [failed.id, cancelled.id]
        assert [chain.id for chain in chains_cancelled.items] == [cancelled.id]

    async def test_error_types_match_the_last_entry_of_the_history(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        timed_out = await running_job(state_adapter, now, type_name="a")
        await fail(
            state_adapter,
            timed_out.id,
            now=now,
            worker_id=timed_out.leased_by,
            attempt_error=attempt_error(1, at=now, error_type="JobTimeoutError"),
        )
        changed = await running_job(state_adapter, now + SECOND, type_name="b")
        await rescheduled_with(
            state_adapter, changed, attempt_error(1, at=now, error_type="JobTimeoutError"), now=now
        )
        again = await running_job(state_adapter, now + 2 * SECOND, type_name="c")
        await rescheduled_with(state_adapter, again, attempt_error(1, at=now, error_type="KeyError"), now=now)
        await finished(state_adapter, now + 3 * SECOND, "failed")  # no history at all
        async with state_adapter.transaction(read_only=True) as tx:
            by_timeout = await tx.jobs_list(JobsList(error_types=["JobTimeoutError"], order="asc"))
            both = await tx.jobs_list(JobsList(error_types=["JobTimeoutError", "KeyError"], order="asc"))
            dead = await tx.jobs_list(JobsList(statuses=["failed"], error_types=["JobTimeoutError"]))
        assert ids(by_timeout.items) == [timed_out.id, changed.id]
        assert ids(both.items) == [timed_out.id, changed.id, again.id]
        assert ids(dead.items) == [timed_out.id]

    async def test_dead_letters_by_type_and_error_page_with_a_cursor(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        letters = []
        for n in range(5):
            job = await start(state_adapter, now=now + n * SECOND, type_name="send")
            entry = attempt_error(0, at=now, error_type="SMTPError")
            letters.append((await fail(state_adapter, job.id, now=now, attempt_error=entry)).job)
        await finished(state_adapter, now, "failed", type_name="other")
        bounced = await start(state_adapter, now=now + SECOND, type_name="send")
        await fail(
            state_adapter, bounced.id, now=now, attempt_error=attempt_error(0, at=now, error_type="Bounce")
        )
        await finished(state_adapter, now + 2 * SECOND, "failed", type_name="send")  # no history
        params = JobsList(
            type_names=["send"], statuses=["failed"], error_types=["SMTPError"], order="asc", limit=2
        )
        pages: list[list[str]] = []
        async with state_adapter.transaction(read_only=True) as tx:
            page = await tx.jobs_list(params)
            pages.append(ids(page.items))
            while page.next_cursor is not None:
                page = await tx.jobs_list(
                    JobsList(
                        type_names=["send"],
                        statuses=["failed"],
                        error_types=["SMTPError"],
                        order="asc",
                        limit=2,
                        cursor=page.next_cursor,
                    )
                )
                pages.append(ids(page.items))
        expected = ids(letters)
        assert pages == [expected[0:2], expected[2:4], expected[4:]]
