"""``Worker(sync_handler_wrapper=)``: the hook jobchain.contrib.django uses around sync handlers.

No Django here: the hook is the worker's, and it must run in the handler's own thread
(Django's connections are per thread), around plain and batch sync handlers alike.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from jobchain import ChainStart, Client, JobTypes
from jobchain.errors import InvalidArgumentError
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.worker import Attempt, Batch, Processors, Worker


@dataclass
class Item:
    n: int


types = JobTypes()
single = types.define("wrap.single", input=Item, output=int, entry=True)
batched = types.define("wrap.batched", input=Item, output=int, entry=True)
failing = types.define("wrap.failing", input=Item, output=int, entry=True, max_attempts=1)


class Recorder:
    """A wrapper that records, per call, the thread it ran in and what the handler saw."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.local = threading.local()
        self.exits = 0

    def __call__(self, call: Callable[[], Any]) -> Any:
        self.local.inside = True
        self.calls.append(("enter", threading.get_ident()))
        try:
            return call()
        finally:
            self.local.inside = False
            self.exits += 1


async def _run(client: Client, processors: Processors, wrapper: object, chain_ids: list[str]) -> None:
    async with Worker(client, processors, concurrency=2, poll_interval=0.05, sync_handler_wrapper=wrapper):  # type: ignore[arg-type]
        for chain_id in chain_ids:
            await client.await_chain(chain_id, timeout=30, poll_interval=0.05)


async def _start(client: Client, starts: list[ChainStart[Any]]) -> list[str]:
    async with client.transaction() as tx:
        return [s.id for s in await client.start_chains(tx, starts)]


async def test_the_wrapper_runs_in_the_handlers_thread_around_each_sync_call() -> None:
    client = Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types)
    recorder = Recorder()
    seen: list[tuple[bool, int]] = []
    processors = Processors()

    @processors.handler(single)
    def handle(attempt: Attempt[Item, int]) -> int:
        seen.append((getattr(recorder.local, "inside", False), threading.get_ident()))
        return attempt.input.n + 1

    ids = await _start(client, [ChainStart(job_type=single, input=Item(n=i)) for i in range(3)])
    await _run(client, processors, recorder, ids)
    assert [(await client.get_chain(i)).output for i in ids] == [1, 2, 3]  # type: ignore[union-attr]
    assert len(seen) == 3
    assert all(inside for inside, _ in seen)
    assert sorted(t for _, t in seen) == sorted(t for _, t in recorder.calls)
    assert threading.get_ident() not in {t for _, t in seen}
    assert recorder.exits == 3


async def test_the_wrapper_wraps_sync_batch_handlers_too() -> None:
    client = Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types)
    recorder = Recorder()
    inside: list[bool] = []
    processors = Processors()

    @processors.batch_handler(batched, max_batch=10)
    def handle(batch: Batch[Item, int]) -> list[int]:
        inside.append(getattr(recorder.local, "inside", False))
        return [i.n for i in batch.inputs]

    ids = await _start(client, [ChainStart(job_type=batched, input=Item(n=i)) for i in range(4)])
    await _run(client, processors, recorder, ids)
    assert inside
    assert all(inside)
    assert recorder.exits == len(inside)


async def test_a_handler_exception_passes_through_the_wrapper_and_fails_the_job() -> None:
    client = Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types)
    recorder = Recorder()
    processors = Processors()

    @processors.handler(failing)
    def handle(attempt: Attempt[Item, int]) -> int:
        raise ValueError("boom")

    [chain_id] = await _start(client, [ChainStart(job_type=failing, input=Item(n=1))])
    async with Worker(client, processors, poll_interval=0.05, sync_handler_wrapper=recorder):
        with pytest.raises(Exception, match="boom"):
            await client.await_chain(chain_id, timeout=30, poll_interval=0.05)
    assert recorder.exits == 1
    job = await client.get_job(chain_id)
    assert job is not None
    assert job.status.value == "failed"


async def test_async_handlers_are_not_wrapped() -> None:
    client = Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types)
    recorder = Recorder()
    processors = Processors()

    @processors.handler(single)
    async def handle(attempt: Attempt[Item, int]) -> Any:
        return await attempt.complete(attempt.input.n)

    ids = await _start(client, [ChainStart(job_type=single, input=Item(n=5))])
    await _run(client, processors, recorder, ids)
    assert recorder.calls == []


def test_a_wrapper_that_is_not_callable_is_refused() -> None:
    client = Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types)
    processors = Processors()
    processors.register(single, lambda attempt: 1)
    with pytest.raises(InvalidArgumentError, match="sync_handler_wrapper"):
        Worker(client, processors, sync_handler_wrapper="close_old_connections")  # type: ignore[arg-type]
