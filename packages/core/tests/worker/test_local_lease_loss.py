"""Lease loss is noticed locally (issue 35, deliver 2): when no renewal has been confirmed by
the local deadline — renewals hang in a partition — a staged handler's signal fires with
``lease_expired`` although the database never answered, and its slot is free for other work.
The monotonic clock is injected; renewals hang at a gate; nothing waits on the wall clock."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from jobchain import JobTypes
from jobchain.client import Client
from jobchain.contracts import JobRenewLease
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.worker import AbortReason, Attempt, Completed, Processors, Worker
from jobchain.worker.backoff import LeaseConfig

BOUND = 30.0
QUIET = 3600.0
"""Heartbeats an hour apart: the clock jumps here are about leases, not the worker's liveness
(a jump past ``alive_for`` would stop every attempt; see test_liveness_deadline.py)."""
LEASE = LeaseConfig(duration=timedelta(seconds=30), renew_every=timedelta(milliseconds=50))


class HangingRenewals(MemoryStateAdapter):
    """Renewals never answer once ``hang`` is set: the database is cut off for them."""

    def __init__(self) -> None:
        super().__init__()
        self.hang = False
        self.renewals = 0
        self.answered = 0
        self._answer = asyncio.Condition()

    async def answered_at_least(self, count: int) -> None:
        async with self._answer:
            await self._answer.wait_for(lambda: self.answered >= count)

    def transaction(self, *, read_only: bool = False, connection: object | None = None) -> Any:
        opened = super().transaction(read_only=read_only, connection=connection)
        owner = self

        class Wrapped:
            async def __aenter__(self) -> Any:
                tx = await opened.__aenter__()
                renew = tx.job_renew_lease

                async def job_renew_lease(params: JobRenewLease) -> Any:
                    owner.renewals += 1
                    if owner.hang:
                        await asyncio.Event().wait()  # no answer, ever
                    result = await renew(params)
                    async with owner._answer:
                        owner.answered += 1
                        owner._answer.notify_all()
                    return result

                tx.job_renew_lease = job_renew_lease
                return tx

            async def __aexit__(self, *exc: Any) -> Any:
                return await opened.__aexit__(*exc)

        return Wrapped()


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


async def test_hanging_renewals_fire_lease_expired_and_free_the_slot() -> None:
    types = JobTypes()
    slow = types.define("slow", input=int, output=int, entry=True)
    state = HangingRenewals()
    client = Client(state, MemoryNotifyAdapter(), types)
    clock = FakeMonotonic()
    reasons: list[AbortReason] = []
    first_running = asyncio.Event()
    first_aborted = asyncio.Event()
    second_started = asyncio.Event()
    let_first_return = asyncio.Event()
    processors = Processors()

    @processors.handler(slow)
    async def handle(attempt: Attempt[int, int]) -> Completed:
        await attempt.prepare("staged")
        if attempt.input == 2:
            second_started.set()
            return await attempt.complete(2)
        first_running.set()
        reasons.append(await attempt.signal.wait())
        first_aborted.set()
        await let_first_return.wait()  # a handler that does not stop at once
        return await attempt.complete(1)

    async with client.transaction() as tx:
        await client.start_chain(tx, slow, 1)
    worker = Worker(
        client, processors, concurrency=1, lease=LEASE, poll_interval=0.05, heartbeat_interval=QUIET
    )
    worker.monotonic = clock
    await worker.start()
    try:
        async with asyncio.timeout(BOUND):
            await first_running.wait()
        state.hang = True
        async with client.transaction() as tx:
            await client.start_chain(tx, slow, 2)
        assert not first_aborted.is_set()
        clock.now += LEASE.duration.total_seconds()
        async with asyncio.timeout(BOUND):
            await first_aborted.wait()
        assert reasons == [AbortReason.LEASE_EXPIRED]
        # The first handler still runs, but no longer counts against concurrency=1.
        async with asyncio.timeout(BOUND):
            await second_started.wait()
        assert not let_first_return.is_set()
    finally:
        let_first_return.set()
        await worker.stop()


async def test_confirmed_renewals_move_the_local_deadline() -> None:
    types = JobTypes()
    slow = types.define("slow", input=int, output=int, entry=True)
    state = HangingRenewals()
    client = Client(state, MemoryNotifyAdapter(), types)
    clock = FakeMonotonic()
    running = asyncio.Event()
    finish = asyncio.Event()
    seen: list[AbortReason | None] = []
    processors = Processors()

    @processors.handler(slow)
    async def handle(attempt: Attempt[int, int]) -> Completed:
        await attempt.prepare("staged")
        running.set()
        await finish.wait()
        seen.append(attempt.signal.reason)
        return await attempt.complete(1)

    async with client.transaction() as tx:
        started = await client.start_chain(tx, slow, 1)
    worker = Worker(
        client, processors, concurrency=1, lease=LEASE, poll_interval=0.05, heartbeat_interval=QUIET
    )
    worker.monotonic = clock
    await worker.start()
    try:
        async with asyncio.timeout(BOUND):
            await running.wait()
        for _ in range(3):  # three leases' worth of time, each step confirmed by a renewal
            before = state.answered
            clock.now += LEASE.duration.total_seconds() / 2
            async with asyncio.timeout(BOUND):
                # Two answers: the second was surely sent after the step.
                await state.answered_at_least(before + 2)
        finish.set()
        chain = await client.await_chain(started.id, timeout=BOUND)
        assert chain.output == 1
        assert seen == [None]
    finally:
        finish.set()
        await worker.stop()


async def test_a_handler_resumed_past_its_deadline_sees_the_abort_before_anything_else_runs() -> None:
    """After a stall (SIGSTOP, a GC pause) the handler's continuation may run before the lease
    watch: ``signal.aborted`` must already say so."""
    types = JobTypes()
    slow = types.define("slow", input=int, output=int, entry=True)
    state = HangingRenewals()
    client = Client(state, MemoryNotifyAdapter(), types)
    clock = FakeMonotonic()
    seen: list[tuple[bool, AbortReason | None]] = []
    done = asyncio.Event()
    processors = Processors()

    @processors.handler(slow)
    async def handle(attempt: Attempt[int, int]) -> Completed:
        await attempt.prepare("staged")
        clock.now += LEASE.duration.total_seconds()  # the process stalled for a whole lease
        seen.append((attempt.signal.aborted, attempt.signal.reason))  # no await in between
        done.set()
        return await attempt.complete(1)

    async with client.transaction() as tx:
        await client.start_chain(tx, slow, 1)
    worker = Worker(
        client, processors, concurrency=1, lease=LEASE, poll_interval=0.05, heartbeat_interval=QUIET
    )
    worker.monotonic = clock
    await worker.start()
    try:
        async with asyncio.timeout(BOUND):
            await done.wait()
        assert seen == [(True, AbortReason.LEASE_EXPIRED)]
    finally:
        await worker.stop()
