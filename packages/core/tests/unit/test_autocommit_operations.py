"""One-operation units of work run in autocommit where the adapter offers it (RunsOperationsAlone).

The worker's claims, its look-ups of the next due job and its group completions are one
operation each; ``client.transaction(autocommit=True)`` is the same for a caller. An adapter
without ``autocommit()`` gets an ordinary transaction.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from jobchain import ChainStart, Client, JobTypes
from jobchain.contracts import RunsOperationsAlone, StateAdapter
from jobchain.errors import InvalidArgumentError
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.worker import Attempt, Completed, Processors, Worker


@dataclass
class Item:
    n: int


types = JobTypes()
item = types.define("alone.item", input=Item, output=int, entry=True)


class RecordingState(MemoryStateAdapter):
    """The in-process adapter, recording which scope each unit of work opened and what it ran."""

    def __init__(self) -> None:
        super().__init__()
        self.scopes: list[tuple[str, list[str]]] = []

    def transaction(self, *, read_only: bool = False, connection: object | None = None) -> Any:
        return self._recorded("transaction", super().transaction(read_only=read_only, connection=connection))

    def autocommit(self, *, read_only: bool = False) -> Any:
        return self._recorded("autocommit", super().transaction(read_only=read_only))

    @asynccontextmanager
    async def _recorded(self, scope: str, opened: Any) -> AsyncIterator[Any]:
        calls: list[str] = []
        async with opened as tx:
            yield _Recorder(tx, calls)
        self.scopes.append((scope, calls))


class _Recorder:
    def __init__(self, tx: Any, calls: list[str]) -> None:
        self._tx = tx
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._tx, name)
        if callable(value) and not name.startswith("_"):
            self._calls.append(name)
        return value


def _processors() -> Processors:
    processors = Processors()

    @processors.handler(item)
    async def handle(attempt: Attempt[Item, int]) -> Completed:
        return await attempt.complete(attempt.input.n * 2)

    return processors


async def _start(client: Client, count: int) -> list[str]:
    async with client.transaction() as tx:
        started = await client.start_chains(
            tx, [ChainStart(job_type=item, input=Item(n=i)) for i in range(count)]
        )
    return [s.id for s in started]


def test_the_recording_adapter_offers_autocommit_and_the_plain_one_does_not() -> None:
    assert isinstance(RecordingState(), RunsOperationsAlone)
    assert not isinstance(MemoryStateAdapter(), RunsOperationsAlone)


async def test_the_worker_claims_looks_ahead_and_group_completes_in_autocommit() -> None:
    state = RecordingState()
    client = Client(state, MemoryNotifyAdapter(), types)
    ids = await _start(client, 20)
    state.scopes.clear()
    async with Worker(client, _processors(), concurrency=5, poll_interval=0.05):
        chains = [await client.await_chain(chain_id, timeout=10, poll_interval=0.05) for chain_id in ids]
        # The worker runs dry and looks for the next due job (seen once its scope has ended).
        async with asyncio.timeout(10):
            while not any("job_next_available" in calls for _, calls in state.scopes):  # noqa: ASYNC110 -- recorded by the worker's task, no event to wait on
                await asyncio.sleep(0.01)
    assert sorted(c.output for c in chains) == [2 * i for i in range(20)]
    by_operation: dict[str, set[str]] = {}
    for scope, calls in state.scopes:
        for call in calls:
            by_operation.setdefault(call, set()).add(scope)
    assert by_operation["jobs_acquire"] == {"autocommit"}
    assert by_operation["job_complete"] == {"autocommit"}  # the group's completions
    assert by_operation["job_next_available"] == {"autocommit"}
    # Every autocommit scope ran one kind of operation: a claim, a look-up or a group.
    for scope, calls in state.scopes:
        if scope == "autocommit":
            assert len(set(calls) - {"read_only"}) <= 1, calls


async def test_client_transaction_autocommit_uses_the_adapters_autocommit() -> None:
    state = RecordingState()
    client = Client(state, MemoryNotifyAdapter(), types)
    async with client.transaction(autocommit=True) as tx:
        [started] = await client.start_chains(tx, [ChainStart(job_type=item, input=Item(n=1))])
    assert state.scopes[-1][0] == "autocommit"
    assert "jobs_create" in state.scopes[-1][1]
    assert await client.get_chain(started.id) is not None


async def test_client_transaction_autocommit_falls_back_to_a_transaction() -> None:
    client = Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types)
    started: list[str] = []

    async def start_then_fail() -> None:
        async with client.transaction(autocommit=True) as tx:
            [chain] = await client.start_chains(tx, [ChainStart(job_type=item, input=Item(n=1))])
            started.append(chain.id)
            raise RuntimeError("rolled back, as an ordinary transaction is")

    with pytest.raises(RuntimeError):
        await start_then_fail()
    assert await client.get_chain(started[0]) is None


async def test_autocommit_cannot_join_your_connection() -> None:
    state: StateAdapter = RecordingState()
    client = Client(state, MemoryNotifyAdapter(), types)
    with pytest.raises(InvalidArgumentError, match="autocommit"):
        async with client.transaction(autocommit=True, connection=object()):
            pass
