"""A worker whose state backend has no tables stops instead of backing off forever."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest

from jobchain import Client, JobTypes
from jobchain.errors import InvalidArgumentError, SchemaNotMigratedError, TransientStateError
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.worker import Attempt, Backoff, Completed, Processors, Worker

types = JobTypes()
served = types.define("fatal.served", input=int, output=int, entry=True)
also_served = types.define("fatal.also", input=int, output=int, entry=True)
not_served = types.define("fatal.other", input=int, output=int, entry=True)


class FailingClaims(MemoryStateAdapter):
    """Memory state whose claims raise ``error`` (the first ``times`` claims; None: always)."""

    def __init__(self, error: Exception, times: int | None = None) -> None:
        super().__init__()
        self.error = error
        self.times = times
        self.claims = 0

    @asynccontextmanager
    async def transaction(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async with super().transaction(*args, **kwargs) as tx:
            acquire = tx.jobs_acquire

            async def claim(params: Any) -> Any:
                self.claims += 1
                if self.times is None or self.claims <= self.times:
                    raise self.error
                return await acquire(params)

            tx.jobs_acquire = claim
            yield tx


def processors() -> Processors:
    found = Processors()

    @found.handler(served)
    async def echo(attempt: Attempt[int, int]) -> Completed:
        return await attempt.complete(attempt.input)

    @found.handler(also_served)
    async def echo_too(attempt: Attempt[int, int]) -> Completed:
        return await attempt.complete(attempt.input)

    return found


async def test_worker_stops_on_missing_tables_and_wait_raises_it() -> None:
    state = FailingClaims(SchemaNotMigratedError("no tables here"))
    client = Client(state, MemoryNotifyAdapter(), types)
    worker = Worker(client, processors(), poll_interval=0.05)
    await worker.start()
    with pytest.raises(SchemaNotMigratedError, match="no tables here"):
        await asyncio.wait_for(worker.wait(), 20)
    await worker.stop()
    assert state.claims == 1  # not retried


async def test_run_until_stopped_raises_missing_tables_after_stopping() -> None:
    state = FailingClaims(SchemaNotMigratedError())
    client = Client(state, MemoryNotifyAdapter(), types)
    worker = Worker(client, processors(), poll_interval=0.05)
    with pytest.raises(SchemaNotMigratedError, match="jobchain migrate"):
        await asyncio.wait_for(worker.run_until_stopped(), 20)


async def test_a_transient_failure_is_retried_not_fatal() -> None:
    state = FailingClaims(TransientStateError("connection lost"), times=1)
    client = Client(state, MemoryNotifyAdapter(), types)
    worker = Worker(
        client,
        processors(),
        poll_interval=0.05,
        recovery=Backoff(initial=timedelta(0), maximum=timedelta(0)),
    )
    async with worker:
        async with client.transaction() as tx:
            started = await client.start_chain(tx, served, 7)
        chain = await client.await_chain(started.id, timeout=20, poll_interval=0.05)
    assert chain.output == 7
    assert state.claims >= 2


async def test_wait_before_start_is_a_typed_error() -> None:
    worker = Worker(Client(MemoryStateAdapter(), None, types), processors())
    with pytest.raises(InvalidArgumentError, match="start"):
        await worker.wait()


def test_type_names_are_the_served_types_only() -> None:
    worker = Worker(Client(MemoryStateAdapter(), None, types), processors())
    assert worker.type_names == ["fatal.also", "fatal.served"]
    assert not_served.name not in worker.type_names
