"""Retention across ``resolves_on_any_end`` blockers (``ChainsPrune``).

Each chain of an ordering key blocks the next one through a blocker row that any terminal
status resolves, and so does a chain waited for with ``JobWait(runs_after_failed=True)``.
Such a reference never holds a qualifying chain back: the chain goes with those blocker rows,
and the dependent keeps its other blockers. So a key that keeps getting chains still loses
its history. A declared (or plain waited-for) blocker still holds its chain back.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from jobchain.contracts import BlockedJobsList, ChainsPrune, StateAdapter
from jobchain.entities import Job, JobStatus
from jobchain_conformance.helpers import (
    acquire_job,
    blockers_of,
    cancel,
    complete,
    fail,
    find_job,
    get_job,
    ids,
    prune,
    run_and_complete,
    start,
    wait_for,
)
from jobchain_conformance.suites.state_scheduling_ordering import KEY, Ending, end, keyed

SECOND = timedelta(seconds=1)
LATER = timedelta(minutes=1)


async def pruned_ids(adapter: StateAdapter, params: ChainsPrune) -> list[str]:
    """Prune once; the ids of the chains it deleted, in its order."""
    return [chain.id for chain in (await prune(adapter, params)).chains]


async def referenced_by(adapter: StateAdapter, chain_id: str) -> list[str]:
    """Ids of the jobs that hold a blocker row on ``chain_id`` (``blocked_jobs_list``)."""
    async with adapter.transaction(read_only=True) as tx:
        page = await tx.blocked_jobs_list(BlockedJobsList(blocker_chain_id=chain_id, limit=100))
    return ids(page.items)


async def blocker_ids(adapter: StateAdapter, job: Job) -> list[str]:
    return [chain.id for chain in await blockers_of(adapter, job.id)]


class AnyEndPruneTests:
    """A ``resolves_on_any_end`` reference never keeps a qualifying chain from being pruned."""

    @pytest.mark.parametrize("pending_newest", [True, False])
    async def test_a_key_that_keeps_getting_chains_loses_its_history_oldest_first(
        self, state_adapter: StateAdapter, now: datetime, pending_newest: bool
    ) -> None:
        chains = [(await keyed(state_adapter, now=now)).job for _ in range(6)]
        done, newest = chains[:5], chains[5]
        for n, job in enumerate(done if pending_newest else done[:4]):
            await complete(state_adapter, job.id, now=now + n * SECOND)
        # pending_newest: the newest chain waits for nothing; else it is still blocked by the
        # fifth chain, which is running (only four chains qualify, at first).
        running = None if pending_newest else await acquire_job(state_adapter, done[4], now=now + 4 * SECOND)
        cutoff = now + LATER
        params = ChainsPrune(completed_before=cutoff, limit=2)
        assert await pruned_ids(state_adapter, params) == [done[0].id, done[1].id]
        assert await blocker_ids(state_adapter, done[2]) == []
        assert await referenced_by(state_adapter, done[1].id) == []
        assert await pruned_ids(state_adapter, params) == [done[2].id, done[3].id]
        if running is not None:
            assert await pruned_ids(state_adapter, params) == []
            assert (await get_job(state_adapter, newest.id)).status is JobStatus.BLOCKED
            finished = await complete(
                state_adapter,
                running.id,
                now=now + 4 * SECOND,
                worker_id=running.leased_by,
                lease_generation=running.lease_generation,
            )
            assert ids(finished.unblocked_jobs) == [newest.id]
        assert await pruned_ids(state_adapter, params) == [done[4].id]
        assert await pruned_ids(state_adapter, params) == []
        assert [await find_job(state_adapter, job.id) for job in done] == [None] * 5
        assert await blocker_ids(state_adapter, newest) == []
        assert await referenced_by(state_adapter, done[4].id) == []
        stored = await get_job(state_adapter, newest.id)
        assert (stored.status, stored.ordering_key) == (JobStatus.PENDING, KEY)
        # The key still orders: the next chain runs after the newest one, which still runs.
        following = await keyed(state_adapter, now=cutoff)
        assert (following.ordered_after, following.job.status) == (newest.id, JobStatus.BLOCKED)
        completed = await run_and_complete(state_adapter, newest, now=cutoff)
        assert ids(completed.unblocked_jobs) == [following.job.id]

    @pytest.mark.parametrize("how", ["failed", "cancelled"])
    async def test_a_failed_or_cancelled_predecessor_goes_under_its_own_cutoff(
        self, state_adapter: StateAdapter, now: datetime, how: Ending
    ) -> None:
        first = (await keyed(state_adapter, now=now)).job
        second = (await keyed(state_adapter, now=now)).job
        await end(state_adapter, first, how, now=now)
        cutoff = now + LATER
        params = ChainsPrune(failed_before=cutoff, cancelled_before=cutoff)
        assert await pruned_ids(state_adapter, params) == [first.id]
        assert await blocker_ids(state_adapter, second) == []
        stored = await get_job(state_adapter, second.id)
        assert (stored.status, stored.failed_by_chain_id) == (JobStatus.PENDING, None)

    async def test_a_successor_blocked_by_a_declared_blocker_stays_blocked_until_it_completes(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        declared = await start(state_adapter, now=now, type_name="declared")
        first = (await keyed(state_adapter, now=now)).job
        second = (await keyed(state_adapter, now=now, blocker_chain_ids=[declared.id])).job
        assert ids((await complete(state_adapter, first.id, now=now)).unblocked_jobs) == []
        assert await pruned_ids(state_adapter, ChainsPrune(completed_before=now + LATER)) == [first.id]
        assert await referenced_by(state_adapter, first.id) == []
        assert await blocker_ids(state_adapter, second) == [declared.id]
        assert (await get_job(state_adapter, second.id)).status is JobStatus.BLOCKED
        done = await complete(state_adapter, declared.id, now=now + SECOND)
        assert ids(done.unblocked_jobs) == [second.id]
        assert (await get_job(state_adapter, second.id)).status is JobStatus.PENDING

    async def test_a_predecessor_also_declared_as_a_blocker_is_held_back_with_its_rows(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = (await keyed(state_adapter, now=now)).job
        second = (await keyed(state_adapter, now=now)).job
        declaring = await start(state_adapter, now=now, type_name="declaring", blocker_chain_ids=[first.id])
        await complete(state_adapter, first.id, now=now)
        free = (await start(state_adapter, now=now + SECOND, type_name="free")).id
        await complete(state_adapter, free, now=now + SECOND)
        # The declared reference holds the predecessor back, and it does not crowd out others.
        params = ChainsPrune(completed_before=now + LATER, limit=1)
        assert await pruned_ids(state_adapter, params) == [free]
        assert await blocker_ids(state_adapter, second) == [first.id]
        assert sorted(await referenced_by(state_adapter, first.id)) == sorted([second.id, declaring.id])
        await run_and_complete(state_adapter, declaring, now=now + 2 * SECOND)
        # Now the predecessor goes with its declared dependent's chain (one batch).
        both = ChainsPrune(completed_before=now + LATER, limit=2)
        assert await pruned_ids(state_adapter, both) == [first.id, declaring.id]
        assert await blocker_ids(state_adapter, second) == []
        assert await referenced_by(state_adapter, first.id) == []

    async def test_a_chain_waited_for_with_runs_after_failed_goes_and_the_waiter_runs(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await acquire_job(state_adapter, await start(state_adapter, now=now), now=now)
        child = await start(state_adapter, now=now, type_name="child")
        await wait_for(
            state_adapter,
            job.id,
            [child.id],
            now=now,
            lease_generation=job.lease_generation,
            runs_after_failed=True,
        )
        assert ids((await fail(state_adapter, child.id, now=now + SECOND)).unblocked_jobs) == [job.id]
        assert await pruned_ids(state_adapter, ChainsPrune(failed_before=now + LATER)) == [child.id]
        assert await blocker_ids(state_adapter, job) == []
        again = await acquire_job(state_adapter, await get_job(state_adapter, job.id), now=now + LATER)
        assert (again.attempt, again.attempts_used) == (2, 1)

    @pytest.mark.parametrize("how", ["completed", "cancelled"])
    async def test_a_chain_waited_for_without_runs_after_failed_is_held_back(
        self, state_adapter: StateAdapter, now: datetime, how: Ending
    ) -> None:
        job = await acquire_job(state_adapter, await start(state_adapter, now=now), now=now)
        child = await start(state_adapter, now=now, type_name="child")
        await wait_for(state_adapter, job.id, [child.id], now=now, lease_generation=job.lease_generation)
        if how == "completed":
            await complete(state_adapter, child.id, now=now)
        else:  # the waiter fails with it, and then the two chains go together
            await cancel(state_adapter, [child.id], now=now)
        cutoff = now + LATER
        params = ChainsPrune(completed_before=cutoff, cancelled_before=cutoff, failed_before=cutoff)
        if how == "completed":
            assert await pruned_ids(state_adapter, params) == []
            assert await blocker_ids(state_adapter, job) == [child.id]
        else:
            assert sorted(await pruned_ids(state_adapter, params)) == sorted([child.id, job.chain_id])
