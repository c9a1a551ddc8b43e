"""The reaper: on a timer of its own, due when the heartbeat says, never behind a busy loop."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, TypeVar

import pytest

from jobchain import ChainStart, Client, JobStatus, JobTypes
from jobchain.contracts import Event, JobsAcquire, JobsReapExpired
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.worker import Attempt, Backoff, Completed, Processors, Worker
from jobchain.worker.reaper import EXPIRY_MARGIN, Reaper

T = TypeVar("T")
BOUND = 10.0
"""Upper bound of every wait; a passing run needs a small fraction of it."""

types = JobTypes()
work = types.define("reap.work", input=int, output=int, entry=True)


async def wait_until(probe: Callable[[], Awaitable[T | None]], what: str) -> T:
    try:
        async with asyncio.timeout(BOUND):
            while True:
                value = await probe()
                if value:
                    return value
                await asyncio.sleep(0.01)
    except TimeoutError:
        pytest.fail(f"timed out waiting for {what}")


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)


class ReapRecordingState(MemoryStateAdapter):
    """Records each reap (its params and the scope it ran in) and how many ran at once."""

    def __init__(self) -> None:
        super().__init__()
        self.reaps: list[tuple[JobsReapExpired, str]] = []
        self.reaping = 0
        self.most_at_once = 0
        self.gate: asyncio.Event | None = None

    def transaction(self, *, read_only: bool = False, connection: object | None = None) -> Any:
        return self._scope("transaction", super().transaction(read_only=read_only, connection=connection))

    def autocommit(self, *, read_only: bool = False) -> Any:
        return self._scope("autocommit", super().transaction(read_only=read_only))

    @asynccontextmanager
    async def _scope(self, scope: str, opened: Any) -> AsyncIterator[Any]:
        async with opened as tx:
            reap = tx.jobs_reap_expired

            async def recorded(params: JobsReapExpired) -> Any:
                self.reaps.append((params, scope))
                self.reaping += 1
                self.most_at_once = max(self.most_at_once, self.reaping)
                try:
                    if self.gate is not None:
                        await self.gate.wait()
                    return await reap(params)
                finally:
                    self.reaping -= 1

            tx.jobs_reap_expired = recorded
            yield tx


def echo_processors() -> Processors:
    procs = Processors()

    @procs.handler(work)
    async def echo(attempt: Attempt[int, int]) -> Completed:
        return await attempt.complete(attempt.input)

    return procs


async def ghost_claims(state: MemoryStateAdapter, count: int, lease: timedelta) -> list[str]:
    """A worker with no registry row claims ``count`` jobs and vanishes (a crashed process)."""
    async with state.transaction() as tx:
        claimed = await tx.jobs_acquire(
            JobsAcquire(type_names=["reap.work"], worker_id="ghost-0", lease_for=lease, limit=count)
        )
    return [job.id for job in claimed.jobs]


def reaper_for(client: Client, **options: Any) -> Reaper:
    return Reaper(
        client,
        ["reap.work"],
        "me-1",
        exclude=options.pop("exclude", list),
        on_reaped=lambda: None,
        emit=options.pop("emit", lambda name, attributes, **_: None),
        safety_interval=options.pop("safety_interval", 60.0),
        recovery=Backoff(initial=timedelta(seconds=1), maximum=timedelta(seconds=1)),
        **options,
    )


# ---------------------------------------------------------------- finding 1: a saturated loop


async def test_an_expired_lease_is_rescued_while_the_queue_stays_full(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="jobchain.worker")
    state = MemoryStateAdapter()
    client = Client(state, MemoryNotifyAdapter(), types)
    async with client.transaction() as tx:
        victim = await client.start_chain(tx, work, -1)
    # The victim is the oldest job; its worker died holding it with a short lease.
    assert await ghost_claims(state, 1, timedelta(milliseconds=200)) == [victim.id]
    rescued = asyncio.Event()
    backlog_when_rescued: list[int] = []
    procs = Processors()

    @procs.handler(work)
    async def handle(attempt: Attempt[int, int]) -> Completed:
        if attempt.input == -1:
            pending = await client.list_jobs(statuses=[JobStatus.PENDING], limit=500)
            backlog_when_rescued.append(len(pending.items))
            rescued.set()
        else:
            # Every job done brings two younger ones: no claim ever comes back empty.
            async with client.transaction() as tx:
                await client.start_chains(tx, [ChainStart(job_type=work, input=n) for n in (1, 2)])
        return await attempt.complete(attempt.input)

    async with client.transaction() as tx:
        await client.start_chains(tx, [ChainStart(job_type=work, input=n) for n in range(50)])
    # poll_interval is an hour: only the timer the heartbeat sets can reap during this case.
    worker = Worker(client, procs, concurrency=4, poll_interval=3600, heartbeat_interval=0.05)
    async with worker:
        await asyncio.wait_for(rescued.wait(), BOUND)

    job = await client.get_job(victim.id)
    assert job is not None
    assert job.status is JobStatus.COMPLETED
    assert job.rescue_reason == "lease_expired"
    assert job.rescued_from == "ghost-0"
    assert backlog_when_rescued[0] > 0, "the backlog ran dry: the case did not saturate the worker"
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("reaped ")]
    assert lines == [
        f"reaped 1 job(s) whose lease expired (held by ghost-0); they run again: {victim.id} (reap.work)"
    ]


# ---------------------------------------------------------------- when it runs


async def test_reaps_run_in_autocommit_and_skip_the_workers_own_jobs() -> None:
    state = ReapRecordingState()
    client = Client(state, None, types)
    worker = Worker(client, echo_processors(), poll_interval=3600)
    async with worker:
        await wait_until(_async(lambda: state.reaps), "the reap at start")
    params, scope = state.reaps[0]
    assert scope == "autocommit"
    assert params.type_names == ["reap.work"]
    assert params.limit == 100


async def test_the_reaper_excludes_in_flight_and_buffered_jobs() -> None:
    state = ReapRecordingState()
    client = Client(state, None, types)
    reaper = reaper_for(client, exclude=lambda: ["a", "b"])
    await reaper.reap()
    assert list(state.reaps[0][0].exclude_job_ids) == ["a", "b"]


async def test_the_reaper_is_due_when_the_heartbeat_says() -> None:
    clock = [100.0]
    client = Client(MemoryStateAdapter(), None, types)
    reaper = reaper_for(client, clock=lambda: clock[0], safety_interval=60.0)
    margin = EXPIRY_MARGIN + client.state.time_precision.total_seconds()

    assert reaper.due_at == -math.inf  # once at start
    reaper._safety_due = 160.0  # as after that first reap
    reaper.lease_expires_in(timedelta(seconds=12))
    assert reaper.due_at == pytest.approx(112.0 + margin)
    # A later answer replaces the earlier one: the lease was renewed meanwhile.
    clock[0] = 102.0
    reaper.lease_expires_in(timedelta(seconds=30))
    assert reaper.due_at == pytest.approx(132.0 + margin)
    reaper.lease_expires_in(None)
    assert reaper.due_at == 160.0  # nothing leased elsewhere: the safety timer


async def test_a_reap_repeats_while_full_batches_come_back() -> None:
    state = ReapRecordingState()
    client = Client(state, None, types)
    async with client.transaction() as tx:
        await client.start_chains(tx, [ChainStart(job_type=work, input=n) for n in range(5)])
    await ghost_claims(state, 5, timedelta(microseconds=1))
    recorder: list[tuple[str, dict[str, Any]]] = []
    reaper = reaper_for(
        client, batch=2, emit=lambda name, attributes, **_: recorder.append((name, attributes))
    )

    reaped = await reaper.reap()

    assert len(reaped) == 5
    assert [params.limit for params, _ in state.reaps] == [2, 2, 2]
    assert [name for name, _ in recorder] == ["job_rescued"] * 5
    assert {attributes["reason"] for _, attributes in recorder} == {"lease_expired"}


async def test_at_most_one_reap_statement_is_in_flight() -> None:
    state = ReapRecordingState()
    client = Client(state, None, types)
    state.gate = asyncio.Event()
    reaper = reaper_for(client)
    first = asyncio.create_task(reaper.reap())
    second = asyncio.create_task(reaper.reap())
    await wait_until(_async(lambda: state.reaps), "the first reap to start")
    await asyncio.sleep(0)  # let the second one try
    state.gate.set()
    await asyncio.gather(first, second)
    assert len(state.reaps) == 2
    assert state.most_at_once == 1


async def test_reaped_jobs_are_announced_and_observed() -> None:
    state = MemoryStateAdapter()
    notify = MemoryNotifyAdapter()
    recorder = Recorder()
    client = Client(state, notify, types, observers=[recorder])
    async with client.transaction() as tx:
        started = await client.start_chain(tx, work, 1)
    await ghost_claims(state, 1, timedelta(microseconds=1))
    scheduled: list[str] = []
    lost: list[str] = []
    await notify.listen_job_scheduled(["reap.work"], scheduled.append)
    await notify.listen_job_ownership_lost(started.id, lost.append)
    worker = Worker(client, echo_processors(), poll_interval=3600, heartbeat_interval=0.05)
    async with worker:
        chain = await client.await_chain(started.id, timeout=BOUND, poll_interval=0.05)

    assert chain.output == 1
    assert "reap.work" in scheduled
    assert lost == [started.id]
    rescued = [e.attributes for e in recorder.events if e.name == "job_rescued"]
    assert len(rescued) == 1
    assert rescued[0]["job.id"] == started.id
    assert rescued[0]["rescued_from"] == "ghost-0"
    assert rescued[0]["worker.id"] == worker.worker_id


def _async(check: Callable[[], object]) -> Callable[[], Awaitable[object]]:
    async def probe() -> object:
        return check()

    return probe
