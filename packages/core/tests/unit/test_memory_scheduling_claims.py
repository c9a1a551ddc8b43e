"""The in-process adapter's claim under the scheduling controls: priorities with aging, pause,
``max_running``, fixed-window rate limits, ``held_back``/``retry_at``, and their rollback."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobchain.contracts import (
    JobComplete,
    JobNextAvailable,
    JobsAcquire,
    JobsAcquired,
    JobsCreate,
    NewJob,
    QueueStatsGet,
)
from jobchain.contracts.scheduling import PausedTypesList, TypesPause
from jobchain.entities import Job, JobStatus, RateLimit, Schedule, TypeLimits, new_id
from jobchain.memory._claims import claim_key
from jobchain.memory.state import MemoryStateAdapter, MemoryStateTx

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
AGING = timedelta(minutes=1)


class BoomError(Exception):
    """Rolls a savepoint back."""


@pytest.fixture
def adapter() -> MemoryStateAdapter:
    return MemoryStateAdapter(clock=lambda: T0)


def new(type_name: str = "t", *, priority: int = 0, at: datetime | None = None) -> NewJob:
    return NewJob(
        id=new_id(),
        type_name=type_name,
        chain_type_name=type_name,
        priority=priority,
        schedule=Schedule(at=at) if at is not None else None,
    )


async def create(adapter: MemoryStateAdapter, *jobs: NewJob, now: datetime = T0) -> list[Job]:
    async with adapter.transaction() as tx:
        return [created.job for created in await tx.jobs_create(JobsCreate(jobs=jobs, now=now))]


async def claim(
    adapter: MemoryStateAdapter,
    *types: str,
    limit: int = 1,
    now: datetime = T0,
    limits: dict[str, TypeLimits] | None = None,
    aging: timedelta = AGING,
) -> JobsAcquired:
    async with adapter.transaction() as tx:
        return await tx.jobs_acquire(
            JobsAcquire(
                type_names=types or ("t",),
                worker_id="w",
                lease_for=LEASE,
                limit=limit,
                type_limits=limits or {},
                priority_aging=aging,
                now=now,
            )
        )


async def pause(adapter: MemoryStateAdapter, *types: str, paused: bool = True, now: datetime = T0) -> None:
    async with adapter.transaction() as tx:
        await tx.types_pause(TypesPause(type_names=types, paused=paused, now=now))


def ids(result: JobsAcquired) -> list[str]:
    return [job.id for job in result.jobs]


# ---------------------------------------------------------------- priorities and aging


async def test_higher_priority_first_then_fifo_within_a_priority(adapter: MemoryStateAdapter) -> None:
    low, mid_old, high = await create(adapter, new(priority=-5), new(priority=3), new(priority=9))
    (mid_new,) = await create(adapter, new(priority=3), now=T0 + timedelta(microseconds=1))
    result = await claim(adapter, limit=4, now=T0 + timedelta(seconds=1))
    assert ids(result) == [high.id, mid_old.id, mid_new.id, low.id]
    assert [job.priority for job in result.jobs] == [9, 3, 3, -5]


async def test_a_job_due_for_longer_than_the_aging_goes_ahead_of_any_priority(
    adapter: MemoryStateAdapter,
) -> None:
    (old_low,) = await create(adapter, new(priority=-100), now=T0)
    (fresh_high,) = await create(adapter, new(priority=100), now=T0 + timedelta(seconds=30))
    # Not aged yet (due 30 s before the claim, aging 1 min): priority decides.
    assert ids(await claim(adapter, now=T0 + timedelta(seconds=59))) == [fresh_high.id]
    (other_high,) = await create(adapter, new(priority=100), now=T0 + timedelta(seconds=59))
    # Due exactly one aging ago counts as aged: it goes first.
    assert ids(await claim(adapter, now=T0 + AGING)) == [old_low.id]
    assert ids(await claim(adapter, now=T0 + AGING)) == [other_high.id]


async def test_aged_jobs_go_by_schedule_whatever_their_priorities(adapter: MemoryStateAdapter) -> None:
    first, second, third = await create(
        adapter,
        new(priority=-3, at=T0),
        new(priority=50, at=T0 + timedelta(seconds=2)),
        new(priority=0, at=T0 + timedelta(seconds=1)),
    )
    result = await claim(adapter, limit=3, now=T0 + timedelta(minutes=5))
    assert ids(result) == [first.id, third.id, second.id]


async def test_a_job_scheduled_later_is_not_claimed_whatever_its_priority(
    adapter: MemoryStateAdapter,
) -> None:
    (later,) = await create(adapter, new(priority=100, at=T0 + timedelta(hours=1)))
    (now_job,) = await create(adapter, new(priority=-100))
    result = await claim(adapter, limit=5)
    assert ids(result) == [now_job.id]
    assert not result.has_more
    assert later.status is JobStatus.PENDING


async def test_has_more_counts_every_priority_beyond_the_limit(adapter: MemoryStateAdapter) -> None:
    await create(adapter, new(priority=-1), new(priority=1))
    first = await claim(adapter, limit=1)
    assert first.jobs[0].priority == 1
    assert first.has_more
    second = await claim(adapter, limit=1)
    assert second.jobs[0].priority == -1
    assert not second.has_more


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    jobs=st.lists(
        st.tuples(st.sampled_from([-100, -7, -1, 0, 1, 7, 100]), st.integers(min_value=0, max_value=180)),
        min_size=1,
        max_size=25,
    ),
    limit=st.integers(min_value=1, max_value=8),
)
async def test_the_claim_takes_the_true_top_by_the_claim_order(
    jobs: list[tuple[int, int]], limit: int
) -> None:
    """The union of the three prefixes always holds the top ``limit`` of every pending due job."""
    adapter = MemoryStateAdapter(clock=lambda: T0)
    now = T0 + timedelta(minutes=3)
    created = await create(
        adapter, *(new(priority=priority, at=T0 + timedelta(seconds=offset)) for priority, offset in jobs)
    )
    due = [job for job in created if job.scheduled_at <= now]
    expected = sorted(due, key=lambda job: claim_key(job, now - AGING))[:limit]
    result = await claim(adapter, limit=limit, now=now)
    assert ids(result) == [job.id for job in expected]
    assert result.has_more == (len(due) > limit)


# ---------------------------------------------------------------- pause


async def test_a_paused_type_is_not_claimed_and_resume_brings_it_back(adapter: MemoryStateAdapter) -> None:
    (paused_job,) = await create(adapter, new("p"))
    (other,) = await create(adapter, new("q"))
    await pause(adapter, "p")
    result = await claim(adapter, "p", "q", limit=5)
    assert ids(result) == [other.id]
    assert result.held_back == ()
    await pause(adapter, "p", paused=False)
    assert ids(await claim(adapter, "p", "q", limit=5)) == [paused_job.id]


async def test_a_claim_does_not_see_an_uncommitted_pause_but_sees_its_own(
    adapter: MemoryStateAdapter,
) -> None:
    await create(adapter, new("p"), new("p"))
    async with adapter.transaction() as pausing:
        await pausing.types_pause(TypesPause(type_names=["p"], now=T0))
        assert len((await claim(adapter, "p")).jobs) == 1  # the pause is not committed yet
        own = await pausing.jobs_acquire(
            JobsAcquire(type_names=["p"], worker_id="w", lease_for=LEASE, now=T0)
        )
        assert own.jobs == []
    assert (await claim(adapter, "p")).jobs == []


async def test_next_available_and_queue_stats_see_pause(adapter: MemoryStateAdapter) -> None:
    await create(adapter, new("p"))
    await create(adapter, new("q", at=T0 + timedelta(seconds=10)))
    await pause(adapter, "p", "idle")
    async with adapter.transaction(read_only=True) as tx:
        waiting = await tx.job_next_available(JobNextAvailable(type_names=["p", "q"], now=T0))
        nothing = await tx.job_next_available(JobNextAvailable(type_names=["p"], now=T0))
        stats = await tx.queue_stats(QueueStatsGet(now=T0))
        asked = await tx.queue_stats(QueueStatsGet(type_names=["q"], now=T0))
        listed = await tx.paused_types_list(PausedTypesList())
    assert waiting == timedelta(seconds=10)
    assert nothing is None
    assert [(s.type_name, s.paused, s.total) for s in stats.types] == [
        ("idle", True, 0),
        ("p", True, 1),
        ("q", False, 1),
    ]
    assert [(s.type_name, s.paused) for s in asked.types] == [("q", False)]
    assert [(p.type_name, p.paused_at) for p in listed] == [("idle", T0), ("p", T0)]


async def test_pausing_again_keeps_the_first_paused_at(adapter: MemoryStateAdapter) -> None:
    await pause(adapter, "p", now=T0)
    async with adapter.transaction() as tx:
        again = await tx.types_pause(TypesPause(type_names=["p", "p", "x"], now=T0 + timedelta(hours=1)))
        resumed = await tx.types_pause(TypesPause(type_names=["x"], paused=False))
    assert [(p.type_name, p.paused_at) for p in again] == [("p", T0), ("x", T0 + timedelta(hours=1))]
    assert resumed == []


# ---------------------------------------------------------------- max_running


async def test_max_running_counts_running_jobs_including_expired_leases(adapter: MemoryStateAdapter) -> None:
    await create(adapter, *(new("m") for _ in range(5)))
    limits = {"m": TypeLimits(max_running=2)}
    first = await claim(adapter, "m", limit=5, limits=limits)
    assert len(first.jobs) == 2
    assert first.held_back == ("m",)
    assert first.retry_at is None
    assert not first.has_more  # nothing more may be claimed now
    later = T0 + LEASE * 3  # both leases expired, not reaped: still running
    again = await claim(adapter, "m", limit=5, limits=limits, now=later)
    assert again.jobs == []
    assert again.held_back == ("m",)
    async with adapter.transaction() as tx:
        await tx.job_complete(JobComplete(job_id=first.jobs[0].id, worker_id="w", now=later))
    assert len((await claim(adapter, "m", limit=5, limits=limits, now=later)).jobs) == 1


async def test_a_limit_above_what_is_asked_holds_nothing_back(adapter: MemoryStateAdapter) -> None:
    await create(adapter, *(new("m") for _ in range(3)))
    result = await claim(adapter, "m", limit=2, limits={"m": TypeLimits(max_running=10)})
    assert len(result.jobs) == 2
    assert result.has_more
    assert result.held_back == ()


async def test_a_capped_type_with_fewer_jobs_than_its_cap_is_not_held_back(
    adapter: MemoryStateAdapter,
) -> None:
    await create(adapter, new("m"))
    result = await claim(adapter, "m", limit=5, limits={"m": TypeLimits(max_running=3)})
    assert len(result.jobs) == 1
    assert result.held_back == ()


async def test_limits_cap_each_type_and_other_types_fill_the_claim(adapter: MemoryStateAdapter) -> None:
    await create(adapter, *(new("m") for _ in range(3)), *(new("u") for _ in range(3)))
    result = await claim(adapter, "m", "u", limit=4, limits={"m": TypeLimits(max_running=1)})
    assert sorted(job.type_name for job in result.jobs) == ["m", "u", "u", "u"]
    assert result.held_back == ("m",)
    assert not result.has_more


async def test_concurrent_claims_of_a_limited_type_never_overshoot(adapter: MemoryStateAdapter) -> None:
    await create(adapter, *(new("m") for _ in range(6)))
    limits = {"m": TypeLimits(max_running=3)}
    first_claimed = asyncio.Event()
    release = asyncio.Event()

    async def holder() -> int:
        async with adapter.transaction() as tx:
            got = await tx.jobs_acquire(
                JobsAcquire(
                    type_names=["m"], worker_id="a", lease_for=LEASE, limit=2, type_limits=limits, now=T0
                )
            )
            first_claimed.set()
            await release.wait()
            return len(got.jobs)

    async def second() -> int:
        await first_claimed.wait()
        return len((await claim(adapter, "m", limit=3, limits=limits)).jobs)

    task_a, task_b = asyncio.create_task(holder()), asyncio.create_task(second())
    await asyncio.sleep(0.01)
    assert not task_b.done()  # waits for the first claim's transaction (the type's row lock)
    release.set()
    assert (await task_a, await task_b) == (2, 1)


async def test_an_unlimited_claim_of_the_type_does_not_wait(adapter: MemoryStateAdapter) -> None:
    await create(adapter, *(new("m") for _ in range(3)))
    async with adapter.transaction() as tx:
        await tx.jobs_acquire(
            JobsAcquire(
                type_names=["m"],
                worker_id="a",
                lease_for=LEASE,
                type_limits={"m": TypeLimits(max_running=1)},
                now=T0,
            )
        )
        assert len((await asyncio.wait_for(claim(adapter, "m", limit=5), 1)).jobs) == 2


# ---------------------------------------------------------------- rate limits


async def test_a_rate_limit_counts_claims_per_fixed_window(adapter: MemoryStateAdapter) -> None:
    await create(adapter, *(new("r") for _ in range(10)))
    limits = {"r": TypeLimits(rate_limit=RateLimit(3, timedelta(minutes=1)))}
    start = T0 + timedelta(seconds=10)  # T0 is on a minute boundary
    first = await claim(adapter, "r", limit=2, limits=limits, now=start)
    assert len(first.jobs) == 2
    assert first.held_back == ()
    assert first.retry_at is None
    second = await claim(adapter, "r", limit=5, limits=limits, now=start + timedelta(seconds=5))
    assert len(second.jobs) == 1
    assert second.held_back == ("r",)
    assert second.retry_at == T0 + timedelta(minutes=1)
    assert (await claim(adapter, "r", limit=5, limits=limits, now=T0 + timedelta(seconds=59))).jobs == []
    next_window = await claim(adapter, "r", limit=5, limits=limits, now=T0 + timedelta(minutes=1))
    assert len(next_window.jobs) == 3
    assert next_window.retry_at == T0 + timedelta(minutes=2)


async def test_retry_at_is_only_for_types_a_rate_limit_capped(adapter: MemoryStateAdapter) -> None:
    await create(adapter, *(new("m") for _ in range(3)), *(new("r") for _ in range(3)))
    limits = {
        "m": TypeLimits(max_running=1, rate_limit=RateLimit(10, timedelta(hours=1))),
        "r": TypeLimits(max_running=5, rate_limit=RateLimit(1, timedelta(seconds=10))),
    }
    result = await claim(adapter, "m", "r", limit=5, limits=limits)
    assert sorted(job.type_name for job in result.jobs) == ["m", "r"]
    assert result.held_back == ("m", "r")
    assert result.retry_at == T0 + timedelta(seconds=10)  # r's window; m is capped by max_running


async def test_rolled_back_claims_and_pauses_leave_no_trace(adapter: MemoryStateAdapter) -> None:
    await create(adapter, *(new("r") for _ in range(4)))
    limits = {"r": TypeLimits(rate_limit=RateLimit(2, timedelta(minutes=1)))}
    params = JobsAcquire(
        type_names=["r"], worker_id="w", lease_for=LEASE, limit=2, type_limits=limits, now=T0
    )
    claimed: list[Job] = []

    async def claim_and_pause(tx: MemoryStateTx) -> None:
        async with tx.savepoint() as sp:
            claimed.extend((await sp.jobs_acquire(params)).jobs)
            await sp.types_pause(TypesPause(type_names=["r"], now=T0))
            raise BoomError

    async with adapter.transaction() as tx:
        with pytest.raises(BoomError):
            await claim_and_pause(tx)
        assert await tx.paused_types_list(PausedTypesList()) == []
    assert len(claimed) == 2
    # The window counter went back with the claims: two more fit in this window.
    assert len((await claim(adapter, "r", limit=5, limits=limits)).jobs) == 2


async def test_the_priority_index_holds_exactly_the_pending_prioritized_jobs(
    adapter: MemoryStateAdapter,
) -> None:
    plain, high, low = await create(adapter, new(), new(priority=5), new(priority=-5))

    async def create_then_fail(tx: MemoryStateTx) -> None:
        async with tx.savepoint() as sp:
            await sp.jobs_create(JobsCreate(jobs=[new(priority=9)], now=T0))
            raise BoomError

    async with adapter.transaction() as tx:
        with pytest.raises(BoomError):
            await create_then_fail(tx)
    store = adapter._store
    assert [key[-1] for key in store.prioritized["t"]] == [high.id, low.id]
    await claim(adapter, limit=1)
    assert [key[-1] for key in store.prioritized["t"]] == [low.id]
    assert {key[-1] for key in store.pending["t"]} == {plain.id, low.id}
