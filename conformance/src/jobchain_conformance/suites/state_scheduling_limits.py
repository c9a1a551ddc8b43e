"""Type limits in the claim (``JobsAcquire.type_limits``): ``max_running`` and fixed-window rate
limits, ``held_back`` and ``retry_at``, and claims of a limited type from concurrent
transactions (never above the limit, whatever the interleaving).

``held_back`` names a type whose limit capped the claim below what was asked; a claim that
asked for no more than the limit allowed, or found fewer jobs, holds nothing back. Rate
windows start at multiples of ``per`` since the Unix epoch (``RateLimit.window_start``).
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from jobchain.contracts import JobsAcquire, StateAdapter, StateTx
from jobchain.entities import JobStatus, RateLimit, Schedule, TypeLimits
from jobchain_conformance.helpers import (
    LEASE,
    OTHER_WORKER,
    TYPE,
    WORKER,
    acquire,
    complete,
    fail,
    ids,
    reap,
    reschedule,
    start,
)
from jobchain_conformance.suites.state_scheduling_support import jobs_in, overlap

SECOND = timedelta(seconds=1)
MILLISECOND = timedelta(milliseconds=1)
MINUTE = timedelta(minutes=1)
TIMEOUT = 30.0


def max_running(limit: int, type_name: str = TYPE) -> dict[str, TypeLimits]:
    return {type_name: TypeLimits(max_running=limit)}


def rate(limit: int, per: timedelta = MINUTE, type_name: str = TYPE) -> dict[str, TypeLimits]:
    return {type_name: TypeLimits(rate_limit=RateLimit(limit=limit, per=per))}


async def pending(adapter: StateAdapter, count: int, *, now: datetime, type_name: str = TYPE) -> list[str]:
    """``count`` new due jobs of ``type_name``, created one millisecond apart from ``now``."""
    step = timedelta(milliseconds=1)
    return [(await start(adapter, now=now + n * step, type_name=type_name)).id for n in range(count)]


def claim(
    now: datetime, limits: dict[str, TypeLimits], *, limit: int = 5, worker_id: str = WORKER
) -> JobsAcquire:
    return JobsAcquire(
        type_names=sorted(limits) or [TYPE],
        worker_id=worker_id,
        lease_for=LEASE,
        limit=limit,
        type_limits=limits,
        now=now,
    )


class MaxRunningTests:
    """A claim never brings the running jobs of a type above its ``max_running``."""

    async def test_a_claim_stops_at_max_running_and_holds_the_type_back(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await pending(state_adapter, 5, now=now)
        acquired = await acquire(state_adapter, now=now + SECOND, limit=5, type_limits=max_running(2))
        assert len(acquired.jobs) == 2
        assert (acquired.held_back, acquired.retry_at) == ((TYPE,), None)
        assert len(await jobs_in(state_adapter, status=JobStatus.RUNNING)) == 2

    async def test_jobs_running_for_another_worker_count_against_the_limit(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await pending(state_adapter, 4, now=now)
        await acquire(state_adapter, now=now + SECOND, worker_id=OTHER_WORKER)
        acquired = await acquire(state_adapter, now=now + SECOND, limit=5, type_limits=max_running(2))
        assert len(acquired.jobs) == 1
        assert acquired.held_back == (TYPE,)

    async def test_a_type_at_its_limit_claims_again_once_a_running_job_ends(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await pending(state_adapter, 4, now=now)
        limits = max_running(1)
        (first,) = (await acquire(state_adapter, now=now + SECOND, type_limits=limits)).jobs
        blocked = await acquire(state_adapter, now=now + SECOND, limit=3, type_limits=limits)
        assert (blocked.jobs, blocked.held_back) == ([], (TYPE,))
        await complete(state_adapter, first.id, now=now, worker_id=WORKER)
        (second,) = (await acquire(state_adapter, now=now + SECOND, type_limits=limits)).jobs
        await fail(state_adapter, second.id, now=now, worker_id=WORKER)
        (third,) = (await acquire(state_adapter, now=now + SECOND, type_limits=limits)).jobs
        await reschedule(state_adapter, third.id, now=now, schedule=Schedule(after=MINUTE), worker_id=WORKER)
        (fourth,) = (await acquire(state_adapter, now=now + SECOND, type_limits=limits)).jobs
        assert len({first.id, second.id, third.id, fourth.id}) == 4

    async def test_an_expired_lease_counts_as_running_until_it_is_reaped(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await pending(state_adapter, 2, now=now)
        limits = max_running(1)
        (held,) = (await acquire(state_adapter, now=now, type_limits=limits, lease_for=30 * SECOND)).jobs
        later = now + 2 * MINUTE
        expired = await acquire(state_adapter, now=later, limit=2, type_limits=limits)
        assert (expired.jobs, expired.held_back) == ([], (TYPE,))
        assert ids(await reap(state_adapter, now=later)) == [held.id]
        assert len((await acquire(state_adapter, now=later, limit=2, type_limits=limits)).jobs) == 1

    async def test_a_claim_that_finds_fewer_jobs_than_the_limit_holds_nothing_back(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await pending(state_adapter, 1, now=now)
        acquired = await acquire(state_adapter, now=now + SECOND, limit=5, type_limits=max_running(3))
        assert (len(acquired.jobs), acquired.held_back, acquired.has_more) == (1, (), False)

    async def test_a_claim_asking_no_more_than_the_limit_holds_nothing_back(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await pending(state_adapter, 5, now=now)
        acquired = await acquire(state_adapter, now=now + SECOND, limit=2, type_limits=max_running(2))
        assert (len(acquired.jobs), acquired.held_back) == (2, ())
        # JobsAcquire: eligible means "within the type's type_limits"; the type is now at its
        # limit, so no job beyond the claimed ones is eligible and nothing more is waiting.
        assert acquired.has_more is False, "has_more counted jobs of a type already at max_running"

    async def test_limits_apply_per_type(self, state_adapter: StateAdapter, now: datetime) -> None:
        await pending(state_adapter, 3, now=now, type_name="a")
        free = await pending(state_adapter, 2, now=now, type_name="b")
        acquired = await acquire(
            state_adapter, now=now + SECOND, type_names=["a", "b"], limit=5, type_limits=max_running(1, "a")
        )
        assert sorted(job.type_name for job in acquired.jobs) == ["a", "b", "b"]
        assert set(free) <= set(ids(acquired.jobs))
        assert acquired.held_back == ("a",)

    async def test_a_claim_without_type_limits_is_not_limited(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await pending(state_adapter, 3, now=now)
        await acquire(state_adapter, now=now + SECOND, type_limits=max_running(1))
        acquired = await acquire(state_adapter, now=now + SECOND, limit=5)
        assert (len(acquired.jobs), acquired.held_back) == (2, ())

    async def test_a_capped_type_takes_its_highest_priority_jobs(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await start(state_adapter, now=now, type_name="a")
        urgent = await start(state_adapter, now=now + SECOND, type_name="a", priority=50)
        await start(state_adapter, now=now + 1500 * MILLISECOND, type_name="a", priority=50)
        other = await start(state_adapter, now=now, type_name="b")
        acquired = await acquire(
            state_adapter,
            now=now + 2 * SECOND,
            type_names=["a", "b"],
            limit=2,
            type_limits=max_running(1, "a"),
        )
        assert sorted(ids(acquired.jobs)) == sorted([urgent.id, other.id])
        assert acquired.held_back == ("a",)


class RateLimitTests:
    """At most ``limit`` claims of a type start in each fixed, epoch-aligned window."""

    async def test_at_most_limit_claims_start_in_a_window(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        window = RateLimit(limit=3, per=MINUTE).window_start(now)
        await pending(state_adapter, 6, now=window - MINUTE)
        first = await acquire(state_adapter, now=window + SECOND, limit=2, type_limits=rate(3))
        assert (len(first.jobs), first.held_back, first.retry_at) == (2, (), None)
        capped = await acquire(state_adapter, now=window + 10 * SECOND, limit=5, type_limits=rate(3))
        assert len(capped.jobs) == 1
        assert (capped.held_back, capped.retry_at) == ((TYPE,), window + MINUTE)
        spent = await acquire(state_adapter, now=window + 59 * SECOND, limit=5, type_limits=rate(3))
        assert (spent.jobs, spent.held_back, spent.retry_at) == ([], (TYPE,), window + MINUTE)

    async def test_the_count_starts_again_in_the_next_window(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        window = RateLimit(limit=3, per=MINUTE).window_start(now)
        await pending(state_adapter, 8, now=window - MINUTE)
        assert len((await acquire(state_adapter, now=window, limit=5, type_limits=rate(3))).jobs) == 3
        nxt = await acquire(state_adapter, now=window + MINUTE, limit=5, type_limits=rate(3))
        assert len(nxt.jobs) == 3
        assert (nxt.held_back, nxt.retry_at) == ((TYPE,), window + 2 * MINUTE)

    async def test_windows_are_aligned_on_the_epoch_not_on_the_first_claim(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        window = RateLimit(limit=3, per=MINUTE).window_start(now)
        await pending(state_adapter, 6, now=window - MINUTE)
        late = await acquire(state_adapter, now=window - SECOND, limit=5, type_limits=rate(3))
        assert (len(late.jobs), late.retry_at) == (3, window)
        fresh = await acquire(state_adapter, now=window, limit=5, type_limits=rate(3))
        assert len(fresh.jobs) == 3

    async def test_completed_jobs_give_back_no_rate(self, state_adapter: StateAdapter, now: datetime) -> None:
        window = RateLimit(limit=2, per=MINUTE).window_start(now)
        await pending(state_adapter, 4, now=window - MINUTE)
        claimed = await acquire(state_adapter, now=window + SECOND, limit=2, type_limits=rate(2))
        for job in claimed.jobs:
            await complete(state_adapter, job.id, now=window + SECOND, worker_id=WORKER)
        again = await acquire(state_adapter, now=window + 2 * SECOND, limit=2, type_limits=rate(2))
        assert (again.jobs, again.held_back) == ([], (TYPE,))

    async def test_a_job_claimed_again_counts_again(self, state_adapter: StateAdapter, now: datetime) -> None:
        window = RateLimit(limit=2, per=MINUTE).window_start(now)
        (only,) = await pending(state_adapter, 1, now=window - MINUTE)
        await pending(state_adapter, 1, now=window + 5 * SECOND)  # due only for the last claim
        (running,) = (await acquire(state_adapter, now=window + SECOND, type_limits=rate(2))).jobs
        assert running.id == only
        await reschedule(
            state_adapter, only, now=window + SECOND, schedule=Schedule(after=timedelta(0)), worker_id=WORKER
        )
        again = await acquire(state_adapter, now=window + 2 * SECOND, type_limits=rate(2))
        assert ids(again.jobs) == [only]
        spent = await acquire(state_adapter, now=window + 10 * SECOND, limit=2, type_limits=rate(2))
        assert (spent.jobs, spent.held_back) == ([], (TYPE,))

    async def test_every_worker_shares_the_count(self, state_adapter: StateAdapter, now: datetime) -> None:
        window = RateLimit(limit=3, per=MINUTE).window_start(now)
        await pending(state_adapter, 5, now=window - MINUTE)
        await acquire(
            state_adapter, now=window + SECOND, limit=2, type_limits=rate(3), worker_id=OTHER_WORKER
        )
        mine = await acquire(state_adapter, now=window + 2 * SECOND, limit=5, type_limits=rate(3))
        assert (len(mine.jobs), mine.held_back) == (1, (TYPE,))

    async def test_a_rate_limited_type_leaves_the_others_of_the_claim_alone(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        window = RateLimit(limit=1, per=MINUTE).window_start(now)
        await pending(state_adapter, 3, now=window - MINUTE, type_name="a")
        await pending(state_adapter, 2, now=window - MINUTE, type_name="b")
        acquired = await acquire(
            state_adapter,
            now=window + SECOND,
            type_names=["a", "b"],
            limit=5,
            type_limits=rate(1, type_name="a"),
        )
        assert sorted(job.type_name for job in acquired.jobs) == ["a", "b", "b"]
        assert (acquired.held_back, acquired.retry_at) == (("a",), window + MINUTE)

    async def test_max_running_and_rate_limit_together_allow_the_smaller(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        both = {TYPE: TypeLimits(max_running=1, rate_limit=RateLimit(limit=2, per=MINUTE))}
        window = RateLimit(limit=2, per=MINUTE).window_start(now)
        await pending(state_adapter, 4, now=window - MINUTE)
        first = await acquire(state_adapter, now=window + SECOND, limit=5, type_limits=both)
        assert (len(first.jobs), first.held_back, first.retry_at) == (1, (TYPE,), None)
        await complete(state_adapter, first.jobs[0].id, now=window + SECOND, worker_id=WORKER)
        second = await acquire(state_adapter, now=window + 2 * SECOND, limit=5, type_limits=both)
        assert len(second.jobs) == 1
        await complete(state_adapter, second.jobs[0].id, now=window + 2 * SECOND, worker_id=WORKER)
        third = await acquire(state_adapter, now=window + 3 * SECOND, limit=5, type_limits=both)
        assert (third.jobs, third.held_back, third.retry_at) == ([], (TYPE,), window + MINUTE)

    async def test_held_back_types_are_in_name_order_and_retry_at_is_the_earliest_window_end(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        hourly, minutely = RateLimit(limit=1, per=timedelta(hours=1)), RateLimit(limit=1, per=MINUTE)
        limits = {"zeta": TypeLimits(rate_limit=hourly), "alpha": TypeLimits(rate_limit=minutely)}
        await pending(state_adapter, 2, now=now - MINUTE, type_name="zeta")
        await pending(state_adapter, 2, now=now - MINUTE, type_name="alpha")
        first = await acquire(
            state_adapter, now=now, type_names=["zeta", "alpha"], limit=4, type_limits=limits
        )
        assert sorted(job.type_name for job in first.jobs) == ["alpha", "zeta"]
        assert first.held_back == ("alpha", "zeta")
        assert first.retry_at == minutely.window_start(now) + MINUTE


class ConcurrentLimitTests:
    """Claims of a limited type in overlapping transactions never exceed the limit together."""

    async def test_a_claim_beside_an_uncommitted_claim_at_the_limit_gets_nothing(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await pending(state_adapter, 3, now=now)
        limits = max_running(1)

        async def take(tx: StateTx) -> list[str]:
            return ids((await tx.jobs_acquire(claim(now + SECOND, limits))).jobs)

        race = await overlap(state_adapter, take, take)
        assert len(race.first) == 1
        assert race.second == [], (
            f"two transactions together ran {1 + len(race.second)} jobs of max_running=1"
        )
        assert len(await jobs_in(state_adapter, status=JobStatus.RUNNING)) == 1

    async def test_a_claim_beside_a_rolled_back_claim_gets_the_slot(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await pending(state_adapter, 3, now=now)
        limits = max_running(1)

        async def take(tx: StateTx) -> list[str]:
            return ids((await tx.jobs_acquire(claim(now + SECOND, limits))).jobs)

        race = await overlap(state_adapter, take, take, outcome="rollback")
        assert len(race.second) == 1
        assert ids(await jobs_in(state_adapter, status=JobStatus.RUNNING)) == race.second

    async def test_a_claim_beside_an_uncommitted_claim_shares_its_rate_window(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        window = RateLimit(limit=2, per=MINUTE).window_start(now)
        await pending(state_adapter, 5, now=window - MINUTE)

        async def take(tx: StateTx) -> list[str]:
            return ids((await tx.jobs_acquire(claim(window + SECOND, rate(2)))).jobs)

        race = await overlap(state_adapter, take, take)
        assert (len(race.first), race.second) == (2, [])
        rolled = await overlap(state_adapter, take, take, outcome="rollback")
        assert rolled.second == [], "the window's count went down after a committed claim"

    async def test_a_rolled_back_claim_gives_its_rate_back(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        window = RateLimit(limit=2, per=MINUTE).window_start(now)
        await pending(state_adapter, 5, now=window - MINUTE)

        async def take(tx: StateTx) -> list[str]:
            return ids((await tx.jobs_acquire(claim(window + SECOND, rate(2)))).jobs)

        race = await overlap(state_adapter, take, take, outcome="rollback")
        assert (len(race.first), len(race.second)) == (2, 2)

    async def test_many_parallel_claimers_never_exceed_max_running(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await pending(state_adapter, 10, now=now)
        limits = max_running(3)

        async def take(worker: int) -> list[str]:
            async with state_adapter.transaction() as tx:
                params = claim(now + SECOND, limits, limit=2, worker_id=f"w{worker}")
                return ids((await tx.jobs_acquire(params)).jobs)

        batches = await asyncio.wait_for(asyncio.gather(*(take(worker) for worker in range(6))), TIMEOUT)
        claimed = [job_id for batch in batches for job_id in batch]
        assert len(claimed) == len(set(claimed)) == 3, f"claims together took {batches}"
        assert len(await jobs_in(state_adapter, status=JobStatus.RUNNING)) == 3
