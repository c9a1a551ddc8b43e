"""The PostgreSQL claim with the scheduling controls, in both claim modes and in autocommit:
priority order with aging, pause, max_running and rate limits across concurrent claimers on
separate connections (the serialization on type_control rows), held_back and retry_at."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from psycopg import sql

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
from jobchain.entities import RateLimit, TypeLimits, new_id
from jobchain_postgres import PostgresStateAdapter, StateOptions
from jobchain_postgres.options import Claim

from .conftest import open_state
from .test_statements import backend_pid, until_lock_wait

NOW = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = timedelta(minutes=5)
MODES: list[Claim] = ["skip-locked", "atomic-update"]


def new(type_name: str = "t", **fields: Any) -> NewJob:
    return NewJob(id=new_id(), type_name=type_name, chain_type_name=type_name, **fields)


def acquire(type_names: list[str], **fields: Any) -> JobsAcquire:
    fields.setdefault("now", NOW)
    fields.setdefault("lease_for", LEASE)
    fields.setdefault("worker_id", "w")
    return JobsAcquire(type_names=type_names, **fields)


@pytest.fixture(params=MODES)
async def state(
    request: pytest.FixtureRequest, postgres_url: str, schema_name: str
) -> AsyncIterator[PostgresStateAdapter]:
    adapter = await open_state(postgres_url, schema_name, claim=request.param)
    yield adapter
    await adapter.close()


async def create(adapter: PostgresStateAdapter, jobs: list[NewJob], now: datetime = NOW) -> None:
    async with adapter.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=jobs, now=now))


async def claim(
    adapter: PostgresStateAdapter, params: JobsAcquire, *, autocommit: bool = False
) -> JobsAcquired:
    context = adapter.autocommit() if autocommit else adapter.transaction()
    async with context as tx:
        return await tx.jobs_acquire(params)


async def running_count(adapter: PostgresStateAdapter, type_name: str) -> int:
    schema = adapter.options.schema
    async with adapter.transaction(read_only=True) as tx:
        cursor = await tx.connection.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE type_name = %s AND status = 'running'").format(
                sql.Identifier(schema, "jobchain_job")
            ),
            (type_name,),
        )
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


# ---------------------------------------------------------------- priorities


async def test_higher_priority_first_fifo_within_a_priority(state: PostgresStateAdapter) -> None:
    low, mid_old, mid_new, high = (
        new(priority=-5),
        new(priority=3),
        new(priority=3),
        new(priority=50),
    )
    plain = new()
    await create(state, [low, mid_old], NOW - timedelta(seconds=30))
    await create(state, [plain, mid_new, high], NOW - timedelta(seconds=20))
    got = await claim(state, acquire(["t"], limit=5))
    assert [job.id for job in got.jobs] == [high.id, mid_old.id, mid_new.id, plain.id, low.id]
    assert [job.priority for job in got.jobs] == [50, 3, 3, 0, -5]


async def test_a_job_due_longer_than_the_aging_goes_ahead_of_every_priority(
    state: PostgresStateAdapter,
) -> None:
    old_low = new(priority=-100)
    await create(state, [old_low], NOW - timedelta(minutes=2))
    flood = sorted((new(priority=100) for _ in range(5)), key=lambda job: job.id)  # FIFO: one created_at
    await create(state, flood, NOW - timedelta(seconds=1))
    first = await claim(state, acquire(["t"], limit=2, priority_aging=timedelta(minutes=1)))
    assert [job.id for job in first.jobs] == [old_low.id, flood[0].id]
    assert first.has_more
    # With a longer aging the old job has not aged: the flood goes first.
    fresh_low = new(priority=-100)
    await create(state, [fresh_low], NOW - timedelta(minutes=2))
    second = await claim(state, acquire(["t"], limit=5, priority_aging=timedelta(minutes=10)))
    assert [job.id for job in second.jobs] == [job.id for job in flood[1:]] + [fresh_low.id]


async def test_the_claim_order_spans_types_and_limits_each_prefix(state: PostgresStateAdapter) -> None:
    # Many jobs of every priority band in two types: the claim takes the overall best `limit`.
    jobs = [new(type_name=f"t{n % 2}", priority=(n % 7) - 3) for n in range(60)]
    await create(state, jobs, NOW - timedelta(seconds=10))
    got = await claim(state, acquire(["t0", "t1"], limit=11))
    # One creation time: FIFO within a priority falls back to the id.
    best = sorted(jobs, key=lambda job: (-job.priority, job.id))[:11]
    assert [job.id for job in got.jobs] == [job.id for job in best]


# ---------------------------------------------------------------- pause


async def test_a_paused_type_is_not_claimed_and_a_resumed_one_is(state: PostgresStateAdapter) -> None:
    await create(state, [new("a"), new("b")])
    async with state.transaction() as tx:
        paused = await tx.types_pause(TypesPause(type_names=["a", "never-seen"], now=NOW))
    assert [(p.type_name, p.paused_at) for p in paused] == [("a", NOW), ("never-seen", NOW)]
    async with state.transaction() as tx:
        again = await tx.types_pause(TypesPause(type_names=["a"], now=NOW + LEASE))
        listed = await tx.paused_types_list(PausedTypesList())
        next_a = await tx.job_next_available(JobNextAvailable(type_names=["a"], now=NOW))
        next_b = await tx.job_next_available(JobNextAvailable(type_names=["a", "b"], now=NOW))
    assert [(p.type_name, p.paused_at) for p in again] == [("a", NOW)]  # keeps its paused_at
    assert [p.type_name for p in listed] == ["a", "never-seen"]
    assert (next_a, next_b) == (None, timedelta(0))
    got = await claim(state, acquire(["a", "b"], limit=5))
    assert [job.type_name for job in got.jobs] == ["b"]
    assert not got.has_more
    limited = await claim(state, acquire(["a"], limit=5, type_limits={"a": TypeLimits(max_running=3)}))
    assert (limited.jobs, limited.held_back) == ([], ())
    async with state.transaction(read_only=True) as tx:
        stats = await tx.queue_stats(QueueStatsGet(now=NOW))
    assert [(s.type_name, s.paused, s.pending) for s in stats.types] == [
        ("a", True, 1),
        ("b", False, 0),
        ("never-seen", True, 0),
    ]
    async with state.transaction() as tx:
        assert await tx.types_pause(TypesPause(type_names=["a"], paused=False, now=NOW)) == []
        assert [p.type_name for p in await tx.paused_types_list(PausedTypesList())] == ["never-seen"]
    got = await claim(state, acquire(["a"], limit=5), autocommit=True)
    assert [job.type_name for job in got.jobs] == ["a"]


async def test_a_pause_waits_for_an_open_limited_claim_of_its_type(
    postgres_url: str, schema_name: str
) -> None:
    # The claim holds the type's type_control row until it commits; a pause that commits after
    # it is seen by every later claim.
    first = await open_state(postgres_url, schema_name)
    [pauser] = await many_claimers(postgres_url, schema_name, "skip-locked", 1)
    try:
        await create(first, [new() for _ in range(4)])
        pid = await backend_pid(pauser)
        async with first.transaction() as tx:
            got = await tx.jobs_acquire(acquire(["t"], limit=1, type_limits={"t": TypeLimits(max_running=2)}))
            assert len(got.jobs) == 1
            pause = asyncio.create_task(_pause(pauser, "t"))
            await until_lock_wait(postgres_url, pid, pause, "the pause did not wait for the open claim")
        await asyncio.wait_for(pause, 10)
        assert (await claim(first, acquire(["t"], limit=4))).jobs == []
    finally:
        await pauser.close()
        await first.close()


async def _pause(adapter: PostgresStateAdapter, type_name: str) -> None:
    async with adapter.transaction() as tx:
        await tx.types_pause(TypesPause(type_names=[type_name], now=NOW))


# ---------------------------------------------------------------- max_running


async def many_claimers(
    postgres_url: str, schema_name: str, mode: Claim, count: int
) -> list[PostgresStateAdapter]:
    """``count`` adapters, each with its own connection (a pool of one)."""
    adapters = []
    for _ in range(count):
        adapters.append(
            await PostgresStateAdapter.open(
                postgres_url,
                StateOptions(schema=schema_name, claim=mode, pool_min_size=1, pool_max_size=1),
            )
        )
    return adapters


@pytest.mark.pg_connections(10)  # the setup adapter, 8 claimers, an adapter's opening probe
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("autocommit", [False, True])
async def test_concurrent_claimers_never_exceed_max_running(
    postgres_url: str, schema_name: str, mode: Claim, autocommit: bool
) -> None:
    setup = await open_state(postgres_url, schema_name, claim=mode)
    claimers = await many_claimers(postgres_url, schema_name, mode, 8)
    try:
        # The limited jobs come first in FIFO order: a claimer takes them while its cap allows.
        await create(setup, [new("limited") for _ in range(120)], NOW - timedelta(seconds=10))
        await create(setup, [new("free") for _ in range(80)], NOW - timedelta(seconds=5))
        limits = {"limited": TypeLimits(max_running=5)}
        for round_number in range(4):
            results = await _together(
                [
                    claim(
                        adapter,
                        acquire(["limited", "free"], limit=3, worker_id=f"w{n}", type_limits=limits),
                        autocommit=autocommit,
                    )
                    for n, adapter in enumerate(claimers)
                ]
            )
            claimed = [job for result in results for job in result.jobs if job.type_name == "limited"]
            assert await running_count(setup, "limited") == 5, f"round {round_number}"
            assert len(claimed) == (5 if round_number == 0 else 2)
            assert any("limited" in result.held_back for result in results)
            assert len({job.id for result in results for job in result.jobs}) == sum(
                len(result.jobs) for result in results
            )
            # Two of the running ones finish: the next round may start exactly two more.
            running = (await _running(setup, "limited"))[:2]
            async with setup.transaction() as tx:
                for job_id, worker in running:
                    await tx.job_complete(JobComplete(job_id=job_id, worker_id=worker, output=None, now=NOW))
    finally:
        for adapter in claimers:
            await adapter.close()
        await setup.close()


async def _running(adapter: PostgresStateAdapter, type_name: str) -> list[tuple[str, str]]:
    schema = adapter.options.schema
    async with adapter.transaction(read_only=True) as tx:
        cursor = await tx.connection.execute(
            sql.SQL(
                "SELECT id::text, leased_by FROM {} WHERE type_name = %s AND status = 'running' ORDER BY id"
            ).format(sql.Identifier(schema, "jobchain_job")),
            (type_name,),
        )
        return [(row[0], row[1]) for row in await cursor.fetchall()]


async def test_expired_leases_count_as_running_until_reaped(state: PostgresStateAdapter) -> None:
    await create(state, [new() for _ in range(5)])
    limits = {"t": TypeLimits(max_running=2)}
    first = await claim(state, acquire(["t"], limit=5, type_limits=limits, lease_for=timedelta(seconds=1)))
    assert (len(first.jobs), first.held_back, first.retry_at) == (2, ("t",), None)
    later = await claim(state, acquire(["t"], limit=5, type_limits=limits, now=NOW + timedelta(hours=1)))
    assert (later.jobs, later.held_back, later.has_more) == ([], ("t",), False)


async def test_a_limit_above_what_is_waiting_holds_nothing_back(state: PostgresStateAdapter) -> None:
    await create(state, [new() for _ in range(3)] + [new("u") for _ in range(4)])
    got = await claim(state, acquire(["t", "u"], limit=10, type_limits={"t": TypeLimits(max_running=5)}))
    assert (len(got.jobs), got.held_back, got.has_more) == (7, (), False)
    # The claim's own limit binds before the type's: not held back, has_more as usual.
    await create(state, [new() for _ in range(4)])
    small = await claim(state, acquire(["t"], limit=1, type_limits={"t": TypeLimits(max_running=5)}))
    assert (len(small.jobs), small.held_back, small.has_more) == (1, (), True)


# ---------------------------------------------------------------- rate limits


@pytest.mark.parametrize("autocommit", [False, True])
async def test_rate_limit_counts_claims_per_fixed_window(
    state: PostgresStateAdapter, autocommit: bool
) -> None:
    await create(state, [new("r") for _ in range(20)], NOW - timedelta(hours=1))
    limits = {"r": TypeLimits(rate_limit=RateLimit(limit=4, per=timedelta(minutes=1)))}
    window_end = NOW + timedelta(minutes=1)
    at = NOW + timedelta(seconds=10)
    first = await claim(state, acquire(["r"], limit=3, type_limits=limits, now=at), autocommit=autocommit)
    assert (len(first.jobs), first.held_back, first.retry_at) == (3, (), None)
    second = await claim(state, acquire(["r"], limit=3, type_limits=limits, now=at), autocommit=autocommit)
    assert (len(second.jobs), second.held_back, second.retry_at) == (1, ("r",), window_end)
    assert not second.has_more  # the rest waits for the window, not for another claim
    third = await claim(
        state, acquire(["r"], limit=3, type_limits=limits, now=window_end - timedelta(microseconds=1))
    )
    assert (third.jobs, third.held_back, third.retry_at) == ([], ("r",), window_end)
    # The next window starts at its multiple of the period since the epoch: the count restarts.
    fourth = await claim(
        state, acquire(["r"], limit=10, type_limits=limits, now=window_end), autocommit=autocommit
    )
    assert (len(fourth.jobs), fourth.held_back, fourth.retry_at) == (
        4,
        ("r",),
        window_end + timedelta(minutes=1),
    )


@pytest.mark.pg_connections(8)  # the setup adapter, 6 claimers, an adapter's opening probe
async def test_rate_limited_claimers_on_separate_connections_share_one_window(
    postgres_url: str, schema_name: str
) -> None:
    for mode in MODES:
        setup = await open_state(postgres_url, schema_name, claim=mode)
        claimers = await many_claimers(postgres_url, schema_name, mode, 6)
        type_name = f"rated-{mode}"
        try:
            await create(setup, [new(type_name) for _ in range(60)], NOW - timedelta(hours=1))
            limits = {type_name: TypeLimits(rate_limit=RateLimit(limit=7, per=timedelta(seconds=30)))}
            for window in range(3):
                params = acquire(
                    [type_name], limit=2, type_limits=limits, now=NOW + timedelta(seconds=30 * window + 5)
                )
                results = await _together([claim(adapter, params) for adapter in claimers])
                assert sum(len(result.jobs) for result in results) == 7, (mode, window)
        finally:
            for adapter in claimers:
                await adapter.close()
            await setup.close()


async def _together(claims: list[Coroutine[Any, Any, JobsAcquired]]) -> list[JobsAcquired]:
    """Start every claim at once (each on its own connection) and wait for all."""
    return list(await asyncio.wait_for(asyncio.gather(*claims), 60))


async def test_both_limits_retry_at_only_when_the_rate_capped(state: PostgresStateAdapter) -> None:
    await create(state, [new() for _ in range(10)], NOW - timedelta(hours=1))
    both = {"t": TypeLimits(max_running=2, rate_limit=RateLimit(limit=5, per=timedelta(minutes=1)))}
    got = await claim(state, acquire(["t"], limit=4, type_limits=both))
    assert (len(got.jobs), got.held_back, got.retry_at) == (2, ("t",), None)
    async with state.transaction() as tx:
        for job in got.jobs:
            await tx.job_complete(JobComplete(job_id=job.id, worker_id="w", output=None, now=NOW))
    again = await claim(state, acquire(["t"], limit=4, type_limits=both))
    assert (len(again.jobs), again.held_back, again.retry_at) == (2, ("t",), None)
    async with state.transaction() as tx:
        for job in again.jobs:
            await tx.job_complete(JobComplete(job_id=job.id, worker_id="w", output=None, now=NOW))
    last = await claim(state, acquire(["t"], limit=4, type_limits=both))
    assert (len(last.jobs), last.held_back, last.retry_at) == (1, ("t",), NOW + timedelta(minutes=1))
