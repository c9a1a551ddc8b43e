"""Shutdown past the deadline fires the abort signal with reason shutdown; connect() defaults."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import jobchain
from jobchain import Client, JobStatus, JobTypes
from jobchain.contracts import Event, Observer
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.plugins.hookspecs import hookimpl
from jobchain.plugins.manager import get_plugin_manager
from jobchain.worker import AbortReason, Attempt, Completed, Processors, Worker


@dataclass
class Item:
    n: int


types = JobTypes()
slow = types.define("shutdown.slow", input=Item, output=None, entry=True)


async def test_handler_past_the_shutdown_deadline_sees_reason_shutdown_and_its_job_is_released() -> None:
    reasons: list[AbortReason] = []
    started = asyncio.Event()
    processors = Processors()

    @processors.handler(slow)
    async def handle(attempt: Attempt[Item, None]) -> Completed:
        await attempt.prepare("staged")
        started.set()
        reasons.append(await attempt.signal.wait())
        attempt.signal.raise_if_aborted()
        raise AssertionError("unreachable")

    client = Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types)
    worker = Worker(client, processors, poll_interval=0.05, shutdown_timeout=0.2)
    await worker.start()
    async with client.transaction() as tx:
        started_chain = await client.start_chain(tx, slow, Item(n=1))
    await asyncio.wait_for(started.wait(), 5)
    await worker.stop()

    assert reasons == [AbortReason.SHUTDOWN]
    job = await client.get_job(started_chain.id)
    assert job is not None
    assert job.status is JobStatus.PENDING
    assert job.leased_by is None
    # The release gave the attempt back: it used none of the job's attempt budget.
    assert (job.attempt, job.attempts_used, job.attempt_errors) == (1, 0, ())


async def test_a_job_released_at_shutdown_between_failures_keeps_its_budget() -> None:
    """max_attempts=2: a failure, a release at shutdown, then a failure leaves it failed only
    after its second real failure — the release in between counted for nothing."""
    second_attempt = asyncio.Event()
    processors = Processors()
    budget_types = JobTypes()
    flaky = budget_types.define(
        "shutdown.flaky", input=Item, output=None, entry=True, max_attempts=2, retry=_no_wait()
    )

    @processors.handler(flaky)
    async def handle(attempt: Attempt[Item, None]) -> Completed:
        await attempt.prepare("staged")
        if attempt.job.attempt == 2:
            second_attempt.set()
            await attempt.signal.wait()
            attempt.signal.raise_if_aborted()
        raise ConnectionError(f"attempt {attempt.job.attempt}")

    client = Client(MemoryStateAdapter(), MemoryNotifyAdapter(), budget_types)
    async with client.transaction() as tx:
        started_chain = await client.start_chain(tx, flaky, Item(n=1))
    worker = Worker(client, processors, poll_interval=0.05, shutdown_timeout=0.2)
    await worker.start()
    await asyncio.wait_for(second_attempt.wait(), 5)
    await worker.stop()
    released = await client.get_job(started_chain.id)
    assert released is not None
    assert (released.status, released.attempt, released.attempts_used) == (JobStatus.PENDING, 2, 1)

    worker = Worker(client, processors, poll_interval=0.05)
    await worker.start()
    try:
        with pytest.raises(jobchain.ChainFailedError):
            await client.await_chain(started_chain.id, timeout=10)
    finally:
        await worker.stop()
    failed = await client.get_job(started_chain.id)
    assert failed is not None
    assert (failed.status, failed.attempt, failed.attempts_used) == (JobStatus.FAILED, 3, 2)
    assert [entry.message for entry in failed.attempt_errors] == ["attempt 1", "attempt 3"]


def _no_wait() -> Any:
    from datetime import timedelta

    from jobchain.worker import Backoff

    return Backoff(initial=timedelta(0), maximum=timedelta(0))


async def test_connect_with_nothing_configured_migrates_the_embedded_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("JOBCHAIN_STATE_URL", raising=False)
    monkeypatch.delenv("JOBCHAIN_NOTIFY_URL", raising=False)
    async with await jobchain.connect(job_types=types) as client:
        async with client.transaction() as tx:
            started = await client.start_chain(tx, slow, Item(n=2))
        assert (await client.get_chain(started.id)) is not None
    assert (tmp_path / "jobchain.db").exists()


class Recorder:
    def __init__(self) -> None:
        self.names: list[str] = []

    def on_event(self, event: Event) -> None:
        self.names.append(event.name)


async def test_connect_attaches_the_observers_that_plugins_provide() -> None:
    recorder = Recorder()

    class ObserverPlugin:
        @hookimpl
        def jobchain_observers(self) -> list[Observer]:
            return [recorder]

    pm = get_plugin_manager()
    plugin = ObserverPlugin()
    pm.register(plugin)
    try:
        async with await jobchain.connect("memory://", notify="none", job_types=types) as client:
            async with client.transaction() as tx:
                await client.start_chain(tx, slow, Item(n=3))
    finally:
        pm.unregister(plugin)
    assert "chain_created" in recorder.names


class GatedState(MemoryStateAdapter):
    """Holds the next write transaction at its start until ``gate`` is set; counts claims."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()
        self.claims = 0

    @asynccontextmanager
    async def transaction(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        gate = self.gate
        if gate is not None and not kwargs.get("read_only"):
            self.gate = None
            self.entered.set()
            await gate.wait()
        async with super().transaction(*args, **kwargs) as tx:
            acquire = tx.jobs_acquire

            async def counted(params: Any) -> Any:
                self.claims += 1
                return await acquire(params)

            tx.jobs_acquire = counted
            yield tx


async def test_a_claim_whose_transaction_opens_after_stop_claims_nothing() -> None:
    processors = Processors()

    @processors.handler(slow)
    async def handle(attempt: Attempt[Item, None]) -> Completed:
        return await attempt.complete(None)

    state = GatedState()
    client = Client(state, None, types)
    worker = Worker(client, processors, poll_interval=0.02)
    await worker.start()
    await asyncio.sleep(0.05)  # the worker polls an empty queue
    state.gate = gate = asyncio.Event()
    await asyncio.wait_for(state.entered.wait(), 5)  # its next claim is opening its transaction
    async with client.transaction() as tx:
        started = await client.start_chain(tx, slow, Item(n=1))
    claims_before = state.claims
    stopping = asyncio.ensure_future(worker.stop())
    await asyncio.sleep(0)
    gate.set()
    await asyncio.wait_for(stopping, 5)

    assert state.claims == claims_before
    job = await client.get_job(started.id)
    assert job is not None
    assert job.status is JobStatus.PENDING
    assert job.attempt == 0
