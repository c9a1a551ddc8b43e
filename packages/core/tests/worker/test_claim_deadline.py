"""A worker never starts a job it may no longer hold (issue 35, deliver 1).

Each claimed job carries a local deadline on the worker's monotonic clock, counted from the
moment the claim was sent: its lease less a safety margin. A claim reply that arrives past it
(a partition held it up) and a buffered job that waited past it are dropped, not started.
The monotonic clock is injected; nothing here waits on the wall clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from jobchain import JobTypes
from jobchain.client import Client
from jobchain.contracts import JobsAcquire
from jobchain.contracts.observe import Event
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.worker import Attempt, Completed, Processors, Worker
from jobchain.worker.backoff import LeaseConfig
from jobchain.worker.local_deadline import safety_margin

BOUND = 30.0
"""Seconds a step may take on a starved machine before the test gives up (never a timing)."""
LEASE = timedelta(seconds=30)


class HeldClaims(MemoryStateAdapter):
    """A memory adapter whose claims wait at a gate once ``hold`` is set: a partition."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    def transaction(self, *, read_only: bool = False, connection: object | None = None) -> Any:
        opened = super().transaction(read_only=read_only, connection=connection)
        owner = self

        class Wrapped:
            async def __aenter__(self) -> Any:
                tx = await opened.__aenter__()
                acquire = tx.jobs_acquire

                async def jobs_acquire(params: JobsAcquire) -> Any:
                    result = await acquire(params)
                    if owner.hold and result.jobs:
                        owner.entered.set()
                        await owner.gate.wait()  # the reply is held up on its way back
                    return result

                tx.jobs_acquire = jobs_acquire
                return tx

            async def __aexit__(self, *exc: Any) -> Any:
                return await opened.__aexit__(*exc)

        return Wrapped()


class Events:
    def __init__(self) -> None:
        self.names: list[str] = []
        self.seen = asyncio.Event()

    def on_event(self, event: Event) -> None:
        self.names.append(event.name)
        if event.name == "job_claim_expired":
            self.seen.set()


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _setup() -> tuple[Client, HeldClaims, Events, Any, list[int]]:
    types = JobTypes()
    echo = types.define("echo", input=int, output=int, entry=True)
    state = HeldClaims()
    events = Events()
    client = Client(state, MemoryNotifyAdapter(), types, observers=[events])
    return client, state, events, echo, []


def _worker(client: Client, processors: Processors, clock: Callable[[], float], **kw: Any) -> Worker:
    # Heartbeats an hour apart: the clock jumps here are about leases, not the worker's
    # liveness (a jump past alive_for stops every attempt; see test_liveness_deadline.py).
    kw.setdefault("heartbeat_interval", 3600.0)
    worker = Worker(
        client, processors, lease=LeaseConfig(duration=LEASE, renew_every=LEASE / 2), poll_interval=0.05, **kw
    )
    worker.monotonic = clock
    return worker


async def test_a_claim_reply_that_arrives_past_the_lease_is_not_started() -> None:
    client, state, events, echo, started = _setup()
    clock = FakeMonotonic()
    processors = Processors()

    @processors.handler(echo)
    async def handle(attempt: Attempt[int, int]) -> Completed:
        started.append(attempt.input)
        return await attempt.complete(attempt.input)

    async with client.transaction() as tx:
        await client.start_chain(tx, echo, 1)
    state.hold = True
    worker = _worker(client, processors, clock)
    await worker.start()
    try:
        async with asyncio.timeout(BOUND):
            await state.entered.wait()
        clock.now += LEASE.total_seconds()  # the partition lasted a whole lease
        state.hold = False
        state.gate.set()
        async with asyncio.timeout(BOUND):
            await events.seen.wait()
        assert started == []
        assert worker.inflight_job_ids == []
        assert "job_attempt_started" not in events.names
    finally:
        await worker.stop()


async def test_a_reply_inside_the_lease_less_the_margin_is_started() -> None:
    client, state, events, echo, started = _setup()
    clock = FakeMonotonic()
    processors = Processors()
    done = asyncio.Event()

    @processors.handler(echo)
    async def handle(attempt: Attempt[int, int]) -> Completed:
        started.append(attempt.input)
        done.set()
        return await attempt.complete(attempt.input)

    async with client.transaction() as tx:
        await client.start_chain(tx, echo, 1)
    state.hold = True
    worker = _worker(client, processors, clock)
    await worker.start()
    try:
        async with asyncio.timeout(BOUND):
            await state.entered.wait()
        clock.now += LEASE.total_seconds() - safety_margin(LEASE.total_seconds()) - 0.01
        state.hold = False
        state.gate.set()
        async with asyncio.timeout(BOUND):
            await done.wait()
        assert started == [1]
        assert "job_claim_expired" not in events.names
    finally:
        await worker.stop()


async def test_a_buffered_job_that_waited_past_its_deadline_is_not_started() -> None:
    client, _state, events, echo, started = _setup()
    clock = FakeMonotonic()
    processors = Processors()
    first_running = asyncio.Event()
    let_first_finish = asyncio.Event()

    @processors.handler(echo)
    async def handle(attempt: Attempt[int, int]) -> Completed:
        started.append(attempt.input)
        if attempt.input == 1:
            first_running.set()
            await let_first_finish.wait()
        return await attempt.complete(attempt.input)

    async with client.transaction() as tx:
        await client.start_chain(tx, echo, 1)
        await client.start_chain(tx, echo, 2)
    worker = _worker(client, processors, clock, concurrency=1, prefetch=1)
    await worker.start()
    try:
        async with asyncio.timeout(BOUND):
            await first_running.wait()
        # The first handler is stalled for a whole lease; job 2 waits in the buffer meanwhile.
        clock.now += LEASE.total_seconds()
        let_first_finish.set()
        async with asyncio.timeout(BOUND):
            await events.seen.wait()
        assert started == [1]
    finally:
        await worker.stop()


@pytest.mark.parametrize(("lease", "margin"), [(30.0, 3.0), (2.0, 0.5), (1.0, 0.25), (600.0, 10.0)])
def test_the_safety_margin(lease: float, margin: float) -> None:
    assert safety_margin(lease) == pytest.approx(margin)
