"""Scheduling controls end to end: max_running, rate limits, pause/resume, priorities.

Limits are checked by what the handlers observe (the jobs whose handlers run at once, the
backend's start stamps per rate window) while several workers claim; each case also proves
the limit was exercised (claims that came back ``held_back``). No case asserts on elapsed
time or waits for a window to pass: priorities are measured in claims, rate windows are moved
by the case's frozen clock.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobchain import Client, JobStatus, JobTypes
from jobchain.contracts import JobsAcquire, JobsAcquired, StateTx
from jobchain.entities import RateLimit
from jobchain.errors import InvalidArgumentError
from jobchain.worker import Attempt, Completed, Processors
from jobchain_conformance.suites._integration_base import IntegrationEnv, IntegrationSuiteBase, Num
from jobchain_conformance.suites._integration_wrappers import StateProxy, as_state

WORKERS = 3


def _count_held_back(proxy: StateProxy, type_name: str) -> Counter[str]:
    """Count claims through ``proxy`` and those a limit of ``type_name`` held back."""
    seen: Counter[str] = Counter()

    async def acquire(tx: StateTx, params: JobsAcquire) -> JobsAcquired:
        result = await tx.jobs_acquire(params)
        seen["claims"] += 1
        if type_name in result.held_back:
            seen["held_back"] += 1
        return result

    proxy.overrides["jobs_acquire"] = acquire
    return seen


def _at_least(count: Callable[[], int], wanted: int) -> Callable[[], Awaitable[bool]]:
    """A probe for ``env.wait_for``: true once ``count()`` reached ``wanted``."""

    async def probe() -> bool:
        return count() >= wanted

    return probe


def _at_least_async(count: Callable[[], Awaitable[int]], wanted: int) -> Callable[[], Awaitable[bool]]:
    """A probe for ``env.wait_for``: true once ``await count()`` reached ``wanted``."""

    async def probe() -> bool:
        return await count() >= wanted

    return probe


class TypeLimitTests(IntegrationSuiteBase):
    """``max_running`` and ``rate_limit`` hold across every worker's claims.

    Both cases run on a frozen clock (:meth:`IntegrationEnv.clock`): no lease or heartbeat
    runs out while the handlers wait, so no job is rescued and run again beside itself (which
    would count twice), and a rate window ends only when the case moves the clock.
    """

    async def test_max_running_is_never_exceeded_across_workers(self, env: IntegrationEnv) -> None:
        limit = 2
        types = JobTypes()
        capped = types.define("capped", input=Num, output=None, entry=True, max_running=limit)
        clock = env.clock()
        proxy = StateProxy(env.state)
        client = env.client(types, state=as_state(proxy), clock=clock)
        claims = _count_held_back(proxy, "capped")
        # Job ids of the handlers running now, and how often each job's handler started.
        running: set[str] = set()
        runs: Counter[str] = Counter()
        most = 0
        full = asyncio.Event()
        release = asyncio.Event()
        procs = Processors()

        @procs.handler(capped)
        async def hold(attempt: Attempt[Num, None]) -> Completed:
            nonlocal most
            runs[attempt.job.id] += 1
            running.add(attempt.job.id)
            most = max(most, len(running))
            if len(running) == limit:
                full.set()
            try:
                await release.wait()
            finally:
                # Before the completion: a handler leaves this set before its job stops
                # counting as running in the store, so the set never overstates the store.
                running.discard(attempt.job.id)
            return await attempt.complete(None)

        chains = [await env.start(client, capped, Num(n=i)) for i in range(8)]
        workers = [env.worker(client, procs, concurrency=4, name=f"capped-{i}") for i in range(WORKERS)]
        for worker in workers:
            await worker.start()
        await env.wait_event(full, f"{limit} capped jobs running")
        # Let every worker try (and fail) to claim more while the limit is reached.
        base = claims["held_back"]
        await env.wait_for(
            _at_least(lambda: claims["held_back"], base + WORKERS), "capped claims held back by max_running"
        )
        assert most == limit
        assert len(runs) == limit
        release.set()
        await env.await_chains(client, [c.id for c in chains])
        assert most == limit
        # Each job ran once: the count above is of distinct jobs, none re-run beside itself.
        assert sorted(runs) == sorted(c.id for c in chains)
        assert set(runs.values()) == {1}

    async def test_rate_limit_caps_starts_per_window(self, env: IntegrationEnv) -> None:
        # A window shorter than the lease: even a job still running when the case moves the
        # clock keeps its lease (the case waits for none to run, too).
        rate = RateLimit(limit=3, per=timedelta(seconds=10))
        total = 10
        types = JobTypes()
        metered = types.define("metered", input=Num, output=None, entry=True, rate_limit=rate)
        clock = env.clock()
        first_window = rate.window_start(clock())
        proxy = StateProxy(env.state)
        client = env.client(types, state=as_state(proxy), clock=clock)
        claims = _count_held_back(proxy, "metered")
        started: list[datetime] = []
        procs = Processors()

        @procs.handler(metered)
        async def stamp(attempt: Attempt[Num, None]) -> Completed:
            assert attempt.job.attempt_started_at is not None
            started.append(attempt.job.attempt_started_at)
            return await attempt.complete(None)

        async def completed() -> int:
            page = await client.list_jobs(type_names=[metered], statuses=[JobStatus.COMPLETED], limit=500)
            return len(page.items)

        chains = [await env.start(client, metered, Num(n=i)) for i in range(total)]
        # The case moves the clock a window at a time: heartbeats this rare keep every worker
        # alive to its peers across the moves (no one's running jobs are released).
        workers = [
            env.worker(client, procs, concurrency=4, name=f"metered-{i}", heartbeat_interval=600)
            for i in range(WORKERS)
        ]
        for worker in workers:
            await worker.start()
        expected = [rate.limit, rate.limit, rate.limit, total - 3 * rate.limit]
        reached = 0
        for window, count in enumerate(expected):
            reached += count
            await env.wait_for(
                _at_least(lambda: len(started), reached), f"{reached} starts by window {window}"
            )
            if reached == total:
                break
            # The window is full and the clock stands still: the workers keep claiming and
            # every claim is held back; nothing more starts until the case moves the clock.
            base = claims["held_back"]
            await env.wait_for(
                _at_least(lambda: claims["held_back"], base + WORKERS), f"claims held back in window {window}"
            )
            assert len(started) == reached, (window, len(started))
            # Only once nothing runs: a move past a running job's lease would let it be reaped
            # and started again.
            await env.wait_for(
                _at_least_async(completed, reached), f"the {reached} jobs started so far to complete"
            )
            clock.advance(rate.per)
        await env.await_chains(client, [c.id for c in chains])
        # The backend stamps each start with the clock it counts windows by: the case's.
        per_window = Counter(rate.window_start(at) for at in started)
        assert len(started) == total
        assert [per_window[first_window + i * rate.per] for i in range(len(expected))] == expected
        assert sum(per_window.values()) == total


class PauseTests(IntegrationSuiteBase):
    """A paused type is not claimed by any worker; resuming it lets them run."""

    async def test_paused_type_waits_and_resumes(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        pausable = types.define("pausable", input=Num, output=None, entry=True)
        free = types.define("free", input=Num, output=None, entry=True)
        # A frozen clock: no lease or heartbeat of the three workers runs out, so every job
        # runs exactly once and ``ran`` counts jobs.
        client = env.client(types, clock=env.clock())
        ran: list[str] = []
        procs = Processors()

        @procs.handler(pausable)
        async def run_paused(attempt: Attempt[Num, None]) -> Completed:
            ran.append("pausable")
            return await attempt.complete(None)

        @procs.handler(free)
        async def run_free(attempt: Attempt[Num, None]) -> Completed:
            ran.append("free")
            return await attempt.complete(None)

        paused = await client.pause(pausable)
        assert [p.type_name for p in paused] == ["pausable"]
        held = [await env.start(client, pausable, Num(n=i)) for i in range(3)]
        workers = [env.worker(client, procs, concurrency=2, name=f"pause-{i}") for i in range(WORKERS)]
        for worker in workers:
            await worker.start()
        # Jobs of another type created after the paused ones run; the paused ones wait.
        for i in range(3):
            other = await env.start(client, free, Num(n=i))
            await env.await_chain(client, other.id)
        assert ran == ["free"] * 3
        for chain in held:
            assert (await env.job(client, chain.id)).status is JobStatus.PENDING
        assert [p.type_name for p in await client.paused_types()] == ["pausable"]
        await client.resume(pausable)
        await env.await_chains(client, [c.id for c in held])
        assert sorted(ran) == ["free"] * 3 + ["pausable"] * 3
        assert await client.paused_types() == []


class PriorityTests(IntegrationSuiteBase):
    """Higher priority first, FIFO within one; an aged job is claimed under a flood."""

    async def test_claims_take_higher_priority_first_fifo_within(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        ranked = types.define("ranked", input=Num, output=None, entry=True)
        client = env.client(types)
        order: list[int] = []
        procs = Processors()

        @procs.handler(ranked)
        async def record(attempt: Attempt[Num, None]) -> Completed:
            order.append(attempt.input.n)
            return await attempt.complete(None)

        # n encodes (priority rank, creation order): created interleaved.
        priorities = {0: -5, 1: 0, 2: 10}
        chains = []
        for index in range(3):
            for rank in (0, 1, 2):
                async with client.transaction() as tx:
                    started = await client.start_chain(
                        tx, ranked, Num(n=rank * 10 + index), priority=priorities[rank]
                    )
                chains.append(started.chain)
        async with env.worker(client, procs, concurrency=1, priority_aging=timedelta(hours=1)):
            await env.await_chains(client, [c.id for c in chains])
        assert order == [20, 21, 22, 10, 11, 12, 0, 1, 2]

    async def test_an_aged_low_priority_job_is_claimed_under_a_flood(self, env: IntegrationEnv) -> None:
        aging = timedelta(minutes=1)
        types = JobTypes()
        urgent = types.define("urgent", input=Num, output=None, entry=True, priority=50)
        background = types.define("background", input=Num, output=None, entry=True, priority=-50)
        client = env.client(types)
        # The low job was due two agings ago: it is aged from the first claim on.
        past = datetime.now(UTC) - 2 * aging
        early = Client(env.state, env.notify, types, clock=lambda: past)
        claimed: list[str] = []
        low_done = asyncio.Event()
        park = asyncio.Event()
        parked = asyncio.Event()
        reopen = asyncio.Event()
        procs = Processors()

        @procs.handler(urgent)
        async def flood(attempt: Attempt[Num, None]) -> Completed:
            claimed.append("urgent")
            if park.is_set() and not parked.is_set():
                # Hold the only slot while the case creates the aged job: no claim meanwhile.
                parked.set()
                async with asyncio.timeout(env.wait_timeout):
                    await reopen.wait()
            if not low_done.is_set() and len(claimed) < 500:
                await attempt.start_chain(urgent, Num(n=attempt.input.n + 1))  # the flood goes on
            return await attempt.complete(None)

        @procs.handler(background)
        async def low(attempt: Attempt[Num, None]) -> Completed:
            claimed.append("background")
            low_done.set()
            return await attempt.complete(None)

        async def flooded() -> bool:
            return len(claimed) >= 10

        async with env.worker(client, procs, concurrency=1, priority_aging=aging):
            for i in range(3):
                await env.start(client, urgent, Num(n=i * 1000))
            await env.wait_for(flooded, "the flood of urgent jobs to run")
            park.set()
            await env.wait_event(parked, "an urgent job to hold the slot")
            mark = len(claimed)
            aged = await env.start(early, background, Num(n=0))
            reopen.set()
            await env.await_chain(client, aged.id)
        # Aged jobs come first: the first claim after it exists takes it, though fresh urgent
        # jobs (priority 50 against its -50) were due before that claim and kept coming.
        assert claimed[mark] == "background", claimed[mark : mark + 10]

    async def test_priority_out_of_range_is_refused_before_writing(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        ranked = types.define("ranked_bad", input=Num, output=None, entry=True)
        client = env.client(types)
        bad: Any = 101
        with pytest.raises(InvalidArgumentError, match="-100 to 100"):
            async with client.transaction() as tx:
                await client.start_chain(tx, ranked, Num(n=0), priority=bad)
        assert await env.chains_of_type(client, ranked) == []
