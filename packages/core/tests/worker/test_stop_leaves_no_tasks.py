"""After ``await worker.stop()`` no task the worker created is still pending (issue 33).

A task left behind outlives the worker: it runs on against adapters the caller closes next,
or keeps the event loop from closing. Each test snapshots the loop's tasks before the worker
starts and requires that none was added by the time ``stop()`` returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from jobchain import Client, JobStatus, JobTypes
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.worker import Attempt, Batch, Completed, Processors, Worker

BOUND = 10.0


@dataclass
class Num:
    n: int


def left_behind(before: set[asyncio.Task[object]]) -> list[str]:
    """Tasks pending now that were not pending in ``before`` (the test's own excluded)."""
    current = asyncio.current_task()
    return sorted(
        f"{task.get_name()} ({task.get_coro().__qualname__})"  # type: ignore[union-attr]  # coroutines
        for task in asyncio.all_tasks()
        if task not in before and task is not current
    )


class SilentBroker(MemoryNotifyAdapter):
    """A notify adapter whose wake hints, once ``silent`` is set, wait for a broker that does
    not answer (until ``answer`` is set)."""

    def __init__(self) -> None:
        super().__init__()
        self.silent = False
        self.asked = asyncio.Event()
        self.answer = asyncio.Event()

    async def provide_wake_hint(self, type_name: str, count: int) -> None:
        if self.silent:
            self.asked.set()
            await self.answer.wait()
        await super().provide_wake_hint(type_name, count)


async def test_stop_leaves_no_freed_place_announcement_pending() -> None:
    """An attempt of a ``max_running`` type announces its freed place after it ends; with the
    broker slow to answer, that announcement is still in flight when the worker stops."""
    types = JobTypes()
    capped = types.define("capped", input=Num, output=None, entry=True, max_running=1)
    procs = Processors()

    @procs.handler(capped)
    async def handle(attempt: Attempt[Num, None]) -> Completed:
        return await attempt.complete(None)

    notify = SilentBroker()
    client = Client(MemoryStateAdapter(), notify, types)
    async with client.transaction() as tx:
        started = await client.start_chain(tx, capped, Num(n=1))
    # Silent from now on: the only wake hint left to provide is the freed place's.
    notify.silent = True
    before = set(asyncio.all_tasks())
    worker = Worker(client, procs, poll_interval=0.05)
    await worker.start()
    try:
        await client.await_chain(started.id, timeout=BOUND, poll_interval=0.05)
        await asyncio.wait_for(notify.asked.wait(), BOUND)
        await asyncio.wait_for(worker.stop(), BOUND)
        assert left_behind(before) == []
    finally:
        notify.answer.set()
        await worker.stop()
        await notify.close()


async def test_stop_after_a_mixed_run_leaves_no_task_pending() -> None:
    """Plain, capped and batch jobs through prefetch, group commit and a notify adapter."""
    types = JobTypes()
    plain = types.define("plain", input=Num, output=None, entry=True)
    capped = types.define("capped", input=Num, output=None, entry=True, max_running=2)
    batched = types.define("batched", input=Num, output=Num, entry=True)
    procs = Processors()

    async def complete(attempt: Attempt[Num, None]) -> Completed:
        await asyncio.sleep(0)
        return await attempt.complete(None)

    async def double(batch: Batch[Num, Num]) -> Sequence[Num]:
        return [Num(n=item.n * 2) for item in batch.inputs]

    procs.register(plain, complete)
    procs.register(capped, complete)
    procs.register_batch(batched, double, max_batch=4)
    notify = MemoryNotifyAdapter()
    client = Client(MemoryStateAdapter(), notify, types)
    before = set(asyncio.all_tasks())
    ids: list[str] = []
    async with Worker(client, procs, concurrency=4, prefetch=4, poll_interval=0.05):
        for n in range(6):
            async with client.transaction() as tx:
                for job_type in (plain, capped, batched):
                    ids.append((await client.start_chain(tx, job_type, Num(n=n))).id)
        for chain_id in ids:
            await client.await_chain(chain_id, timeout=BOUND, poll_interval=0.05)
    assert left_behind(before) == []
    await notify.close()


async def test_stop_with_an_attempt_running_leaves_no_task_pending() -> None:
    """An attempt still running at stop is signalled, cancelled and released."""
    types = JobTypes()
    slow = types.define("slow", input=Num, output=None, entry=True, max_running=1)
    procs = Processors()
    running = asyncio.Event()

    @procs.handler(slow)
    async def handle(attempt: Attempt[Num, None]) -> Completed:
        await attempt.prepare("staged")
        running.set()
        await asyncio.get_running_loop().create_future()  # never returns by itself
        raise AssertionError("unreachable")

    notify = MemoryNotifyAdapter()
    client = Client(MemoryStateAdapter(), notify, types)
    before = set(asyncio.all_tasks())
    worker = Worker(client, procs, poll_interval=0.05, shutdown_timeout=0.1)
    await worker.start()
    try:
        async with client.transaction() as tx:
            await client.start_chain(tx, slow, Num(n=1))
        await asyncio.wait_for(running.wait(), BOUND)
        await asyncio.wait_for(worker.stop(), BOUND)
        assert left_behind(before) == []
    finally:
        await worker.stop()
        await notify.close()


async def test_stop_returns_when_an_attempt_ignores_its_cancellation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A handler that swallows its cancellation cannot be stopped; stop() must not wait for it
    for ever: it hands the job back and says so (the attempt's late writes are fenced)."""
    types = JobTypes()
    stubborn = types.define("stubborn", input=Num, output=None, entry=True)
    procs = Processors()
    running, released = asyncio.Event(), asyncio.Event()
    ignored: list[int] = []

    @procs.handler(stubborn)
    async def handle(attempt: Attempt[Num, None]) -> Completed:
        await attempt.prepare("staged")
        running.set()
        while not released.is_set():
            try:
                await released.wait()
            except asyncio.CancelledError:
                ignored.append(1)  # what a handler must never do
        raise RuntimeError("released by the test")

    client = Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types)
    before = set(asyncio.all_tasks())
    worker = Worker(client, procs, poll_interval=0.05, shutdown_timeout=0.1)
    await worker.start()
    async with client.transaction() as tx:
        started = await client.start_chain(tx, stubborn, Num(n=1))
    await asyncio.wait_for(running.wait(), BOUND)
    stopping = asyncio.create_task(worker.stop())
    try:
        await asyncio.wait({stopping}, timeout=BOUND)
        assert stopping.done(), "stop() waited for an attempt that ignores its cancellation"
        assert ignored
        job = await client.get_job(started.id)
        assert job is not None
        assert (job.status, job.leased_by) == (JobStatus.PENDING, None)
        assert "ignored their cancellation" in caplog.text
    finally:
        released.set()
        await stopping
        stubborn_tasks = [
            t for t in asyncio.all_tasks() if t not in before and t is not asyncio.current_task()
        ]
        if stubborn_tasks:
            await asyncio.wait(stubborn_tasks, timeout=BOUND)
        assert left_behind(before) == []
