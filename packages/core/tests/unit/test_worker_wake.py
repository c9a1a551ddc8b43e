"""The worker's wake-up path: a wake-up that arrives while a claim or a reap is in flight.

The state adapter below holds chosen operations open (after they computed their result, as
if their snapshot predated a commit) until the test lets them go; the notify adapter lets
them go only once the worker consumed the wake-up, so the order of events is fixed.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from jobchain import Client, JobTypes
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.worker import Attempt, Completed, Processors, Worker


@dataclass
class Item:
    n: int


types = JobTypes()
item = types.define("wake.item", input=Item, output=None, entry=True)


class RecordingState(MemoryStateAdapter):
    """Records claims (with their job count), reaps and next-available look-ups in order.

    It offers ``autocommit()`` (RunsOperationsAlone), as the PostgreSQL adapter does.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, int]] = []
        self.scopes: list[tuple[str, str]] = []  # (operation, the scope it ran in)
        self._held: dict[str, deque[tuple[asyncio.Event, asyncio.Event]]] = {}
        self._grew = asyncio.Event()

    def hold(self, op: str) -> tuple[asyncio.Event, asyncio.Event]:
        """Hold the next ``op`` once it has its result: (entered, release)."""
        pair = (asyncio.Event(), asyncio.Event())
        self._held.setdefault(op, deque()).append(pair)
        return pair

    async def wait_ops(self, count: int) -> None:
        while len(self.ops) < count:
            self._grew.clear()
            await asyncio.wait_for(self._grew.wait(), 5)

    async def _record(self, op: str, count: int) -> None:
        held = self._held.get(op)
        if held:
            entered, release = held.popleft()
            entered.set()
            await release.wait()
        self.ops.append((op, count))
        self._grew.set()

    def transaction(self, *, read_only: bool = False, connection: object | None = None) -> Any:
        return self._scope("transaction", super().transaction(read_only=read_only, connection=connection))

    def autocommit(self, *, read_only: bool = False) -> Any:
        return self._scope("autocommit", super().transaction(read_only=read_only))

    @asynccontextmanager
    async def _scope(self, scope: str, opened: Any) -> AsyncIterator[Any]:
        async with opened as tx:
            acquire, reap, next_available = tx.jobs_acquire, tx.jobs_reap_expired, tx.job_next_available

            async def recorded_acquire(params: Any) -> Any:
                result = await acquire(params)
                await self._record("acquire", len(result.jobs))
                return result

            async def recorded_reap(params: Any) -> Any:
                result = await reap(params)
                self.scopes.append(("reap", scope))
                await self._record("reap", len(result))
                return result

            async def recorded_next(params: Any) -> Any:
                result = await next_available(params)
                await self._record("next", 0)
                return result

            tx.jobs_acquire = recorded_acquire
            tx.jobs_reap_expired = recorded_reap
            tx.job_next_available = recorded_next
            yield tx


class CallbackNotify(MemoryNotifyAdapter):
    """Runs ``after_consume`` on the loop right after the worker took a wake-up."""

    after_consume: Callable[[], None] | None = None

    async def consume_wake_hint(self, type_name: str) -> bool:
        woken = await super().consume_wake_hint(type_name)
        if self.after_consume is not None:
            # Runs after the caller's current step, in which the worker sets its wake event.
            asyncio.get_running_loop().call_soon(self.after_consume)
        return woken


def _setup() -> tuple[RecordingState, CallbackNotify, Client, Worker, asyncio.Event]:
    state = RecordingState()
    notify = CallbackNotify()
    client = Client(state, notify, types)
    started = asyncio.Event()
    processors = Processors()

    @processors.handler(item)
    async def handle(attempt: Attempt[Item, None]) -> Completed:
        started.set()
        return await attempt.complete(None)

    worker = Worker(client, processors, concurrency=2, poll_interval=30)
    return state, notify, client, worker, started


async def test_a_wake_up_during_an_empty_claim_claims_again_at_once() -> None:
    state, notify, client, worker, started = _setup()
    entered, release = state.hold("acquire")  # the worker's first claim
    await worker.start()
    try:
        await asyncio.wait_for(entered.wait(), 5)
        notify.after_consume = release.set
        async with client.transaction() as tx:  # commits after the held claim's snapshot
            await client.start_chain(tx, item, Item(n=1))
        await asyncio.wait_for(started.wait(), 5)
    finally:
        await worker.stop()

    # Not: empty claim, reap, next-available look-up, and only then the claim that finds it.
    assert state.ops[:2] == [("acquire", 0), ("acquire", 1)]


async def test_a_wake_up_during_a_reap_skips_the_next_available_look_up() -> None:
    state, notify, client, worker, started = _setup()
    entered, release = state.hold("reap")  # the reap after the worker's first (empty) claim
    await worker.start()
    try:
        await asyncio.wait_for(entered.wait(), 5)
        notify.after_consume = release.set
        async with client.transaction() as tx:
            await client.start_chain(tx, item, Item(n=1))
        await asyncio.wait_for(started.wait(), 5)
    finally:
        await worker.stop()

    assert state.ops[:3] == [("acquire", 0), ("reap", 0), ("acquire", 1)]


async def test_wake_ups_during_every_claim_do_not_put_the_reap_off() -> None:
    state, notify, _, worker, _ = _setup()
    first = state.hold("acquire")
    second = state.hold("acquire")
    await worker.start()
    try:
        for entered, release in (first, second):
            await asyncio.wait_for(entered.wait(), 5)
            notify.after_consume = release.set
            # A wake-up with no job behind it (say, another worker took the job).
            await notify.publish_job_scheduled(item.name)
        await state.wait_ops(3)
    finally:
        await worker.stop()

    # One immediate re-claim per cycle, then the reap as usual.
    assert state.ops[:3] == [("acquire", 0), ("acquire", 0), ("reap", 0)]


async def test_the_idle_cycle_reaps_in_autocommit() -> None:
    state, _, _, worker, _ = _setup()
    await worker.start()
    try:
        await state.wait_ops(2)  # the first (empty) claim, then the reap
    finally:
        await worker.stop()

    assert state.ops[:2] == [("acquire", 0), ("reap", 0)]
    # One operation: no BEGIN and COMMIT round trips where the adapter can run it alone.
    assert state.scopes[0] == ("reap", "autocommit")
