"""Listings: chains_list, jobs_list, chain_jobs_list, blocked_jobs_list — filters and order.

Rows are created at distinct whole-second times (``now + n s``) so the expected order
never depends on a tie-break; ties and cursor edge cases live in ``state_pagination``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TypeVar

from jobchain.contracts import BlockedJobsList, ChainJobsList, ChainsList, JobsList, StateAdapter
from jobchain.entities import Chain, Job, JobStatus, Page, new_id
from jobchain_conformance.helpers import (
    acquire_job,
    complete,
    continue_chain,
    ids,
    start,
    start_completed,
)

T = TypeVar("T")
P = TypeVar("P", ChainsList, JobsList, ChainJobsList, BlockedJobsList)


def at(now: datetime, seconds: int) -> datetime:
    """``now`` plus whole seconds: distinct, precision-safe creation times."""
    return now + timedelta(seconds=seconds)


async def chains(adapter: StateAdapter, params: ChainsList) -> Page[Chain]:
    async with adapter.transaction(read_only=True) as tx:
        return await tx.chains_list(params)


async def jobs(adapter: StateAdapter, params: JobsList) -> Page[Job]:
    async with adapter.transaction(read_only=True) as tx:
        return await tx.jobs_list(params)


async def chain_jobs(adapter: StateAdapter, params: ChainJobsList) -> Page[Job]:
    async with adapter.transaction(read_only=True) as tx:
        return await tx.chain_jobs_list(params)


async def blocked_jobs(adapter: StateAdapter, params: BlockedJobsList) -> Page[Job]:
    async with adapter.transaction(read_only=True) as tx:
        return await tx.blocked_jobs_list(params)


def chain_ids(page: Page[Chain]) -> list[str]:
    return [chain.id for chain in page.items]


async def walk(fetch: Callable[[P], Awaitable[Page[T]]], params: P) -> list[list[T]]:
    """Every page of a listing, following ``next_cursor`` until it is None."""
    pages: list[list[T]] = []
    cursor: str | None = None
    for _ in range(1000):
        page = await fetch(dataclasses.replace(params, cursor=cursor))
        pages.append(page.items)
        if page.next_cursor is None:
            return pages
        cursor = page.next_cursor
    raise AssertionError("the listing never returned next_cursor=None")


async def five_chains(adapter: StateAdapter, now: datetime) -> list[Job]:
    """Five single-job chains created one second apart, oldest first."""
    return [await start(adapter, now=at(now, n)) for n in range(5)]


class ChainsListTests:
    """StateTx.chains_list(): filters on the chain, order by root created_at, pagination."""

    async def test_returns_an_empty_page_when_no_chains_exist(self, state_adapter: StateAdapter) -> None:
        page = await chains(state_adapter, ChainsList())
        assert (page.items, page.next_cursor) == ([], None)

    async def test_returns_chains_as_root_and_last_job(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        alone = await start(state_adapter, now=now)
        root = await start(state_adapter, now=at(now, 1))
        middle = await continue_chain(state_adapter, root, now=at(now, 2))
        await complete(state_adapter, root.id, now=at(now, 2))
        last = await continue_chain(state_adapter, middle, now=at(now, 3))
        await complete(state_adapter, middle.id, now=at(now, 3))
        page = await chains(state_adapter, ChainsList(order="asc"))
        assert [(c.root.id, c.last.id) for c in page.items] == [(alone.id, alone.id), (root.id, last.id)]

    async def test_chains_sort_by_creation_newest_first_by_default(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        created = await five_chains(state_adapter, now)
        assert chain_ids(await chains(state_adapter, ChainsList())) == ids(reversed(created))

    async def test_chains_sort_oldest_first_when_order_is_asc(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        created = await five_chains(state_adapter, now)
        assert chain_ids(await chains(state_adapter, ChainsList(order="asc"))) == ids(created)

    async def test_chains_paginate_with_cursor(self, state_adapter: StateAdapter, now: datetime) -> None:
        created = await five_chains(state_adapter, now)
        pages = await walk(lambda p: chains(state_adapter, p), ChainsList(limit=2))
        assert [[c.id for c in page] for page in pages] == [
            [created[4].id, created[3].id],
            [created[2].id, created[1].id],
            [created[0].id],
        ]

    async def test_chains_paginate_in_asc_order(self, state_adapter: StateAdapter, now: datetime) -> None:
        created = await five_chains(state_adapter, now)
        pages = await walk(lambda p: chains(state_adapter, p), ChainsList(limit=2, order="asc"))
        assert [[c.id for c in page] for page in pages] == [
            ids(created[0:2]),
            ids(created[2:4]),
            ids(created[4:]),
        ]

    async def test_chains_filter_by_chain_type_name(self, state_adapter: StateAdapter, now: datetime) -> None:
        first = await start(state_adapter, now=now, type_name="a")
        await continue_chain(state_adapter, first, now=at(now, 1), type_name="x")
        second = await start(state_adapter, now=at(now, 2), type_name="b")
        await start(state_adapter, now=at(now, 3), type_name="c")
        page = await chains(state_adapter, ChainsList(type_names=["a", "b"], order="asc"))
        assert chain_ids(page) == [first.id, second.id]

    async def test_chains_filter_by_chain_id(self, state_adapter: StateAdapter, now: datetime) -> None:
        created = await five_chains(state_adapter, now)
        page = await chains(state_adapter, ChainsList(chain_ids=[created[1].id, created[3].id], order="asc"))
        assert chain_ids(page) == [created[1].id, created[3].id]

    async def test_chains_filter_by_the_id_of_any_of_their_jobs(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = await start(state_adapter, now=now)
        follower = await continue_chain(state_adapter, first, now=at(now, 1))
        second = await start(state_adapter, now=at(now, 2))
        await start(state_adapter, now=at(now, 3))
        page = await chains(state_adapter, ChainsList(job_ids=[follower.id, second.id], order="asc"))
        assert chain_ids(page) == [first.id, second.id]

    async def test_chains_filter_by_the_status_of_their_last_job(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        continued = await start(state_adapter, now=now)
        await continue_chain(state_adapter, continued, now=at(now, 1))
        await complete(state_adapter, continued.id, now=at(now, 1))
        pending = await start(state_adapter, now=at(now, 2))
        done = await start_completed(state_adapter, now=at(now, 3), type_name="done")
        running = await start(state_adapter, now=at(now, 4), type_name="run")
        await acquire_job(state_adapter, running, now=at(now, 4))
        by_status = {
            status: chain_ids(await chains(state_adapter, ChainsList(statuses=[status], order="asc")))
            for status in ("pending", "completed", "running")
        }
        assert by_status == {
            "pending": [continued.id, pending.id],
            "completed": [done.id],
            "running": [running.id],
        }

    async def test_root_only_excludes_chains_used_as_blockers(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        dependent = await start(state_adapter, now=at(now, 1), blocker_chain_ids=[blocker.id])
        plain = await start(state_adapter, now=at(now, 2))
        page = await chains(state_adapter, ChainsList(root_only=True, order="asc"))
        assert chain_ids(page) == [dependent.id, plain.id]

    async def test_root_only_excludes_blockers_of_continuations(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        root = await start(state_adapter, now=at(now, 1))
        await continue_chain(state_adapter, root, now=at(now, 2), blocker_chain_ids=[blocker.id])
        page = await chains(state_adapter, ChainsList(root_only=True))
        assert chain_ids(page) == [root.id]

    async def test_chains_filter_by_inclusive_root_creation_bounds(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        created = await five_chains(state_adapter, now)
        params = ChainsList(created_from=at(now, 1), created_to=at(now, 3), order="asc")
        assert chain_ids(await chains(state_adapter, params)) == ids(created[1:4])

    async def test_creation_bounds_use_the_roots_creation_time(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        early = await start(state_adapter, now=now)
        await continue_chain(state_adapter, early, now=at(now, 10))
        params = ChainsList(created_from=at(now, 5))
        assert chain_ids(await chains(state_adapter, params)) == []

    async def test_chain_filters_combine_with_and(self, state_adapter: StateAdapter, now: datetime) -> None:
        wanted = await start(state_adapter, now=now, type_name="a")
        await start_completed(state_adapter, now=at(now, 1), type_name="a")
        await start(state_adapter, now=at(now, 2), type_name="b")
        params = ChainsList(type_names=["a"], statuses=["pending"])
        assert chain_ids(await chains(state_adapter, params)) == [wanted.id]


class JobsListTests:
    """StateTx.jobs_list(): filters on the job, order by created_at, pagination."""

    async def test_returns_an_empty_page_when_no_jobs_exist(self, state_adapter: StateAdapter) -> None:
        page = await jobs(state_adapter, JobsList())
        assert (page.items, page.next_cursor) == ([], None)

    async def test_returns_every_job_across_chains_newest_first(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = await start(state_adapter, now=now)
        second = await start(state_adapter, now=at(now, 1))
        follower = await continue_chain(state_adapter, first, now=at(now, 2))
        assert ids((await jobs(state_adapter, JobsList())).items) == [follower.id, second.id, first.id]

    async def test_jobs_sort_oldest_first_when_order_is_asc(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        created = await five_chains(state_adapter, now)
        assert ids((await jobs(state_adapter, JobsList(order="asc"))).items) == ids(created)

    async def test_jobs_paginate_with_cursor(self, state_adapter: StateAdapter, now: datetime) -> None:
        created = await five_chains(state_adapter, now)
        pages = await walk(lambda p: jobs(state_adapter, p), JobsList(limit=2, order="asc"))
        assert [ids(page) for page in pages] == [ids(created[0:2]), ids(created[2:4]), ids(created[4:])]

    async def test_jobs_filter_by_chain_id(self, state_adapter: StateAdapter, now: datetime) -> None:
        root = await start(state_adapter, now=now)
        follower = await continue_chain(state_adapter, root, now=at(now, 1))
        await start(state_adapter, now=at(now, 2))
        page = await jobs(state_adapter, JobsList(chain_ids=[root.id], order="asc"))
        assert ids(page.items) == [root.id, follower.id]

    async def test_jobs_filter_by_status(self, state_adapter: StateAdapter, now: datetime) -> None:
        done = await start_completed(state_adapter, now=now, type_name="done")
        running = await start(state_adapter, now=at(now, 1), type_name="run")
        await acquire_job(state_adapter, running, now=at(now, 1))
        pending = await start(state_adapter, now=at(now, 2))
        blocked = await start(state_adapter, now=at(now, 3), blocker_chain_ids=[pending.id])
        found = {
            status: ids((await jobs(state_adapter, JobsList(statuses=[status.value]))).items)
            for status in JobStatus
        }
        assert found == {
            JobStatus.BLOCKED: [blocked.id],
            JobStatus.PENDING: [pending.id],
            JobStatus.RUNNING: [running.id],
            JobStatus.COMPLETED: [done.id],
            JobStatus.FAILED: [],
            JobStatus.CANCELLED: [],
        }

    async def test_jobs_filter_by_job_type_name(self, state_adapter: StateAdapter, now: datetime) -> None:
        root = await start(state_adapter, now=now, type_name="a")
        follower = await continue_chain(state_adapter, root, now=at(now, 1), type_name="x")
        await start(state_adapter, now=at(now, 2), type_name="b")
        assert ids((await jobs(state_adapter, JobsList(type_names=["x"]))).items) == [follower.id]

    async def test_jobs_filter_by_chain_type_name(self, state_adapter: StateAdapter, now: datetime) -> None:
        root = await start(state_adapter, now=now, type_name="a")
        follower = await continue_chain(state_adapter, root, now=at(now, 1), type_name="x")
        await start(state_adapter, now=at(now, 2), type_name="b")
        page = await jobs(state_adapter, JobsList(chain_type_names=["a"], order="asc"))
        assert ids(page.items) == [root.id, follower.id]

    async def test_jobs_filter_by_job_id(self, state_adapter: StateAdapter, now: datetime) -> None:
        created = await five_chains(state_adapter, now)
        page = await jobs(state_adapter, JobsList(job_ids=[created[0].id, created[2].id], order="asc"))
        assert ids(page.items) == [created[0].id, created[2].id]

    async def test_jobs_filter_by_inclusive_creation_bounds(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        created = await five_chains(state_adapter, now)
        params = JobsList(created_from=at(now, 1), created_to=at(now, 3))
        assert ids((await jobs(state_adapter, params)).items) == ids(reversed(created[1:4]))


class ChainJobsListTests:
    """StateTx.chain_jobs_list(): one chain's jobs by chain_index."""

    async def test_returns_an_empty_page_for_a_missing_chain(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await start(state_adapter, now=now)
        page = await chain_jobs(state_adapter, ChainJobsList(chain_id=new_id()))
        assert (page.items, page.next_cursor) == ([], None)

    async def test_chain_jobs_are_ordered_by_chain_index_ascending_by_default(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        chain = await three_job_chain(state_adapter, now)
        assert ids((await chain_jobs(state_adapter, ChainJobsList(chain_id=chain[0].id))).items) == ids(chain)

    async def test_chain_jobs_are_ordered_by_chain_index_descending_when_asked(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        chain = await three_job_chain(state_adapter, now)
        page = await chain_jobs(state_adapter, ChainJobsList(chain_id=chain[0].id, order="desc"))
        assert ids(page.items) == ids(reversed(chain))

    async def test_chain_jobs_paginate_with_cursor(self, state_adapter: StateAdapter, now: datetime) -> None:
        chain = await three_job_chain(state_adapter, now)
        pages = await walk(
            lambda p: chain_jobs(state_adapter, p), ChainJobsList(chain_id=chain[0].id, limit=2)
        )
        assert [ids(page) for page in pages] == [ids(chain[:2]), ids(chain[2:])]

    async def test_returns_only_the_chains_own_jobs(self, state_adapter: StateAdapter, now: datetime) -> None:
        chain = await three_job_chain(state_adapter, now)
        other = await three_job_chain(state_adapter, at(now, 10))
        page = await chain_jobs(state_adapter, ChainJobsList(chain_id=other[0].id))
        assert ids(page.items) == ids(other)
        assert set(ids(page.items)).isdisjoint(ids(chain))


async def three_job_chain(adapter: StateAdapter, now: datetime) -> list[Job]:
    """A chain of three jobs (two completed hand-offs), root first."""
    root = await start(adapter, now=now)
    middle = await continue_chain(adapter, root, now=at(now, 1))
    await complete(adapter, root.id, now=at(now, 1))
    last = await continue_chain(adapter, middle, now=at(now, 2))
    await complete(adapter, middle.id, now=at(now, 2))
    return [root, middle, last]


class BlockedJobsListTests:
    """StateTx.blocked_jobs_list(): jobs that declared a chain as a blocker."""

    async def test_returns_the_jobs_blocked_by_a_chain(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        other = await start(state_adapter, now=now, type_name="other")
        first = await start(state_adapter, now=at(now, 1), blocker_chain_ids=[blocker.id])
        second = await start(state_adapter, now=at(now, 2), blocker_chain_ids=[blocker.id, other.id])
        await start(state_adapter, now=at(now, 3), blocker_chain_ids=[other.id])
        page = await blocked_jobs(state_adapter, BlockedJobsList(blocker_chain_id=blocker.id))
        assert ids(page.items) == [second.id, first.id]

    async def test_returns_an_empty_page_when_nothing_is_blocked(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now)
        page = await blocked_jobs(state_adapter, BlockedJobsList(blocker_chain_id=blocker.id))
        assert (page.items, page.next_cursor) == ([], None)

    async def test_blocked_jobs_sort_oldest_first_when_order_is_asc(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker, dependents = await blocker_with_dependents(state_adapter, now, 3)
        page = await blocked_jobs(state_adapter, BlockedJobsList(blocker_chain_id=blocker.id, order="asc"))
        assert ids(page.items) == ids(dependents)

    async def test_blocked_jobs_paginate_with_cursor(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker, dependents = await blocker_with_dependents(state_adapter, now, 3)
        pages = await walk(
            lambda p: blocked_jobs(state_adapter, p), BlockedJobsList(blocker_chain_id=blocker.id, limit=2)
        )
        assert [ids(page) for page in pages] == [ids(dependents[:0:-1]), [dependents[0].id]]

    async def test_keeps_listing_dependents_after_they_were_unblocked(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker, dependents = await blocker_with_dependents(state_adapter, now, 2)
        await complete(state_adapter, blocker.id, now=at(now, 5))
        page = await blocked_jobs(state_adapter, BlockedJobsList(blocker_chain_id=blocker.id, order="asc"))
        assert [(job.id, job.status) for job in page.items] == [
            (job.id, JobStatus.PENDING) for job in dependents
        ]

    async def test_lists_continuations_that_declared_the_blocker(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        root = await start(state_adapter, now=at(now, 1))
        follower = await continue_chain(state_adapter, root, now=at(now, 2), blocker_chain_ids=[blocker.id])
        page = await blocked_jobs(state_adapter, BlockedJobsList(blocker_chain_id=blocker.id))
        assert ids(page.items) == [follower.id]


async def blocker_with_dependents(adapter: StateAdapter, now: datetime, count: int) -> tuple[Job, list[Job]]:
    """A pending blocker chain and ``count`` jobs it blocks, created one second apart."""
    blocker = await start(adapter, now=now, type_name="blocker")
    dependents = [
        await start(adapter, now=at(now, n + 1), blocker_chain_ids=[blocker.id]) for n in range(count)
    ]
    return blocker, dependents
