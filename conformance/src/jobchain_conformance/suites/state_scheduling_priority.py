"""Claim priorities and aging (``JobsAcquire``): higher priority first, FIFO within a priority,
and a job due for longer than ``priority_aging`` ahead of every job that waited less.

Every claim passes ``now`` and ``priority_aging`` explicitly; "aged" means
``scheduled_at <= now - priority_aging`` (inclusive). The starvation cases flood a type with
high-priority work arriving faster than it is claimed and check that a low-priority job is
claimed by the first claim after it aged, and not before.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from jobchain.contracts import StateAdapter
from jobchain.entities import PRIORITY_MAX, PRIORITY_MIN, Schedule
from jobchain_conformance.helpers import (
    TYPE,
    acquire,
    continue_chain,
    get_job,
    ids,
    run_and_complete,
    start,
)

SECOND = timedelta(seconds=1)
AGING = timedelta(minutes=1)
LONG_LEASE = timedelta(hours=1)


async def claim_order(
    adapter: StateAdapter,
    *,
    now: datetime,
    count: int,
    type_names: Sequence[str] = (TYPE,),
    aging: timedelta = AGING,
) -> list[str]:
    """Claim one job at a time, ``count`` times, at ``now``; the ids in claim order."""
    order: list[str] = []
    for _ in range(count):
        acquired = await acquire(
            adapter, now=now, type_names=type_names, priority_aging=aging, lease_for=LONG_LEASE
        )
        order += ids(acquired.jobs)
    return order


class PriorityTests:
    """Higher priority is claimed first; FIFO (scheduled_at, created_at, id) within a priority."""

    async def test_priority_is_stored_on_the_job(self, state_adapter: StateAdapter, now: datetime) -> None:
        high = await start(state_adapter, now=now, priority=PRIORITY_MAX)
        low = await start(state_adapter, now=now, priority=PRIORITY_MIN)
        plain = await start(state_adapter, now=now)
        assert (high.priority, low.priority, plain.priority) == (PRIORITY_MAX, PRIORITY_MIN, 0)
        stored = [await get_job(state_adapter, job.id) for job in (high, low, plain)]
        assert [job.priority for job in stored] == [PRIORITY_MAX, PRIORITY_MIN, 0]

    async def test_higher_priority_is_claimed_first_whatever_the_creation_order(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        low = await start(state_adapter, now=now, priority=0)
        mid = await start(state_adapter, now=now + SECOND, priority=5)
        high = await start(state_adapter, now=now + 2 * SECOND, priority=10)
        order = await claim_order(state_adapter, now=now + 3 * SECOND, count=3)
        assert order == [high.id, mid.id, low.id]

    async def test_negative_priority_is_claimed_after_the_default(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        background = await start(state_adapter, now=now, priority=-5)
        plain = await start(state_adapter, now=now + SECOND)
        lowest = await start(state_adapter, now=now - SECOND, priority=PRIORITY_MIN)
        order = await claim_order(state_adapter, now=now + 2 * SECOND, count=3)
        assert order == [plain.id, background.id, lowest.id]

    async def test_fifo_within_a_priority_by_scheduled_at_then_created_at(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        # Created first but scheduled last: scheduled_at decides before created_at.
        later = await start(state_adapter, now=now, priority=3, schedule=Schedule(at=now + 3 * SECOND))
        first = await start(state_adapter, now=now + SECOND, priority=3)
        second = await start(state_adapter, now=now + 2 * SECOND, priority=3)
        other = await start(state_adapter, now=now + 2 * SECOND, priority=1)
        order = await claim_order(state_adapter, now=now + 4 * SECOND, count=4)
        assert order == [first.id, second.id, later.id, other.id]

    async def test_a_batch_claims_the_highest_priorities(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        plain = [await start(state_adapter, now=now + n * SECOND) for n in range(4)]
        urgent = [await start(state_adapter, now=now + (10 + n) * SECOND, priority=50) for n in range(2)]
        acquired = await acquire(state_adapter, now=now + 20 * SECOND, limit=3, priority_aging=AGING)
        assert sorted(ids(acquired.jobs)) == sorted([*ids(urgent), plain[0].id])
        assert acquired.has_more is True

    async def test_priority_orders_claims_across_types(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        older = await start(state_adapter, now=now, type_name="a")
        urgent = await start(state_adapter, now=now + SECOND, type_name="b", priority=20)
        order = await claim_order(state_adapter, now=now + 2 * SECOND, count=2, type_names=["a", "b"])
        assert order == [urgent.id, older.id]

    async def test_a_job_not_yet_due_is_not_claimed_whatever_its_priority(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await start(state_adapter, now=now, priority=PRIORITY_MAX, schedule=Schedule(at=now + 10 * SECOND))
        plain = await start(state_adapter, now=now)
        order = await claim_order(state_adapter, now=now + 5 * SECOND, count=2)
        assert order == [plain.id]

    async def test_a_continuation_keeps_the_priority_it_is_created_with(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now, priority=30)
        done = (await run_and_complete(state_adapter, root, now=now)).job
        follow = await continue_chain(state_adapter, done, now=now)
        # The state backend stores what it is given: the client decides a continuation's priority.
        assert (await get_job(state_adapter, follow.id)).priority == 0
        urgent = await start(state_adapter, now=now + SECOND, priority=1)
        assert await claim_order(state_adapter, now=now + 2 * SECOND, count=2) == [urgent.id, follow.id]


class AgingTests:
    """A job due for ``priority_aging`` or longer is claimed ahead of every job that waited less."""

    async def test_an_aged_low_priority_job_goes_ahead_of_newer_high_priority_jobs(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        low = await start(state_adapter, now=now, priority=PRIORITY_MIN)
        high = await start(state_adapter, now=now + 30 * SECOND, priority=PRIORITY_MAX)
        assert await claim_order(state_adapter, now=now + 61 * SECOND, count=2) == [low.id, high.id]

    async def test_before_it_ages_the_low_priority_job_waits(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        low = await start(state_adapter, now=now, priority=PRIORITY_MIN)
        high = await start(state_adapter, now=now + 30 * SECOND, priority=PRIORITY_MAX)
        assert await claim_order(state_adapter, now=now + 59 * SECOND, count=2) == [high.id, low.id]

    async def test_a_job_due_exactly_priority_aging_ago_has_aged(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        low = await start(state_adapter, now=now, priority=-1)
        high = await start(state_adapter, now=now + 30 * SECOND, priority=1)
        assert await claim_order(state_adapter, now=now + AGING, count=2) == [low.id, high.id]

    async def test_aged_jobs_are_claimed_fifo_whatever_their_priorities(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        oldest = await start(state_adapter, now=now, priority=-50)
        high = await start(state_adapter, now=now + SECOND, priority=50)
        middle = await start(state_adapter, now=now + 2 * SECOND, priority=0)
        fresh = await start(state_adapter, now=now + 70 * SECOND, priority=100)
        order = await claim_order(state_adapter, now=now + 2 * AGING, count=4)
        assert order == [oldest.id, high.id, middle.id, fresh.id]

    async def test_aging_counts_from_scheduled_at_not_created_at(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        delayed = await start(state_adapter, now=now, priority=-10, schedule=Schedule(at=now + AGING))
        high = await start(state_adapter, now=now + 100 * SECOND, priority=10)
        # Created two minutes ago but due for one minute less one second: not aged yet.
        assert await claim_order(state_adapter, now=now + 2 * AGING - SECOND, count=2) == [
            high.id,
            delayed.id,
        ]

    async def test_priority_aging_is_the_claims_parameter(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        low = await start(state_adapter, now=now, priority=-10)
        high = await start(state_adapter, now=now + 30 * SECOND, priority=10)
        later = now + 5 * AGING
        slow = await claim_order(state_adapter, now=later, count=1, aging=timedelta(hours=1))
        assert slow == [high.id]
        low_too = await start(state_adapter, now=now + SECOND, priority=-10)
        fast = await claim_order(state_adapter, now=later, count=2, aging=timedelta(seconds=10))
        assert fast == [low.id, low_too.id]

    async def test_a_low_priority_job_is_claimed_once_it_ages_under_a_flood(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        # High-priority work arrives faster than it is claimed (3 new, 2 claimed every 10 s):
        # without aging the low job would wait forever.
        low = await start(state_adapter, now=now, priority=PRIORITY_MIN)
        claimed_at: datetime | None = None
        for step in range(1, 13):
            at = now + step * 10 * SECOND
            for _ in range(3):
                await start(state_adapter, now=at, priority=PRIORITY_MAX)
            acquired = await acquire(
                state_adapter, now=at, limit=2, priority_aging=AGING, lease_for=LONG_LEASE
            )
            assert len(acquired.jobs) == 2, f"the flood ran dry at +{step * 10} s"
            if low.id in ids(acquired.jobs):
                claimed_at = at
                break
        assert claimed_at == now + AGING, (
            f"the low-priority job due at +0 s was claimed at "
            f"{None if claimed_at is None else claimed_at - now}, expected at the first claim after "
            f"it aged (+{AGING})"
        )

    async def test_several_low_jobs_are_each_claimed_within_their_bound_under_a_flood(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        # One claim of one job every 10 s, 3 high-priority arrivals per claim. Each low job is
        # claimed at the first claim where it is the oldest aged job: +60 s, +70 s, +80 s.
        lows = [await start(state_adapter, now=now + n * SECOND, priority=-20) for n in range(3)]
        claimed: dict[str, timedelta] = {}
        for step in range(1, 13):
            at = now + step * 10 * SECOND
            for _ in range(3):
                await start(state_adapter, now=at, priority=20)
            acquired = await acquire(state_adapter, now=at, priority_aging=AGING, lease_for=LONG_LEASE)
            claimed.update((job.id, at - now) for job in acquired.jobs if job.priority < 0)
        assert [claimed.get(job.id) for job in lows] == [
            timedelta(seconds=60),
            timedelta(seconds=70),
            timedelta(seconds=80),
        ]
