"""The worker's idle cycle: an empty claim, then a look-up of the next due job, in autocommit where
it can; the reaper runs on its own timer, only when a lease is due, also in autocommit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from jobchain import Client, JobTypes
from jobchain.contracts import JobsAcquire
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
        self._grew = asyncio.Event()

    async def wait_ops(self, count: int) -> None:
        while len(self.ops) < count:
            self._grew.clear()
            await asyncio.wait_for(self._grew.wait(), 5)

    async def _record(self, op: str, count: int) -> None:
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


def _setup() -> tuple[RecordingState, Worker]:
    state = RecordingState()
    client = Client(state, MemoryNotifyAdapter(), types)
    processors = Processors()

    @processors.handler(item)
    async def handle(attempt: Attempt[Item, None]) -> Completed:
        return await attempt.complete(None)

    return state, Worker(client, processors, concurrency=2, poll_interval=30)


async def test_the_idle_cycle_claims_then_looks_up_the_next_due_job_without_reaping() -> None:
    state, worker = _setup()
    await worker.start()
    try:
        await state.wait_ops(2)  # the first (empty) claim, then when to look again
    finally:
        await worker.stop()

    loop_ops = [op for op in state.ops if op[0] != "reap"]
    assert loop_ops[:2] == [("acquire", 0), ("next", 0)]
    # No lease is held anywhere: the reaper ran only its start-up reap (then waits for a
    # reported expiry or its poll_interval safety timer), never one per empty claim.
    assert state.ops.count(("reap", 0)) <= 1


async def test_an_expired_foreign_lease_is_reaped_in_autocommit() -> None:
    state, worker = _setup()
    client = worker.client
    async with client.transaction() as tx:
        await client.start_chain(tx, item, Item(n=1))
    async with state.transaction() as tx:
        claimed = await tx.jobs_acquire(
            JobsAcquire(type_names=[item.name], worker_id="gone", lease_for=timedelta(microseconds=1))
        )
    assert len(claimed.jobs) == 1
    await worker.start()
    try:
        while ("reap", 1) not in state.ops:
            await state.wait_ops(len(state.ops) + 1)
    finally:
        await worker.stop()
    # One operation: no BEGIN and COMMIT round trips where the adapter can run it alone.
    assert ("reap", "autocommit") in state.scopes
    assert ("reap", "transaction") not in state.scopes
