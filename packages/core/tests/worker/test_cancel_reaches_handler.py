"""A cancel reaches a running handler within one lease renewal (issue 36, deliver 7).

"A cancel took 27.5 s to reach a running handler": without notifications (no notify
backend, the SQLite default, or a delivery that is degraded) the only news a running
attempt gets of its job is the answer to its next lease renewal, every ``renew_every``
(30 s by default). The renewal that follows a cancel must fire the handler's signal with
reason ``cancelled``: for a single attempt and for a batch (whose signal fired with
``taken_by_another_worker`` instead). With notifications, a batch hears the cancel as a
single attempt does, without waiting for a renewal.

Renewals are counted where the state adapter's transaction writes them (its transaction
class's ``job_renew_lease``, patched for the test), never timed: the handler waits for its
signal under a generous bound and reads how many renewals were sent since the cancel
committed. Renewals run every 50 ms inside a 60 s lease and heartbeats an hour apart, so a
starved machine neither loses the lease nor lapses the worker's liveness.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import jobchain
from jobchain import Client, JobTypes
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.worker import AbortReason, Attempt, Batch, Completed, Processors, Worker
from jobchain.worker.backoff import LeaseConfig

BOUND = 60.0
"""Upper bound of every wait; a passing run needs a small fraction of it."""
QUIET = 3600.0
"""Heartbeats an hour apart: only the renewals and the cancel are under test."""
RENEWING = LeaseConfig(duration=timedelta(seconds=60), renew_every=timedelta(milliseconds=50))
"""Renewals often, in a lease no starved machine outlasts."""
NOT_RENEWING = LeaseConfig(duration=timedelta(hours=2), renew_every=timedelta(hours=1))
"""No renewal within any test: whatever stops the handler is not a renewal."""

types = JobTypes()
slow = types.define("slow", input=int, output=int, entry=True)
many = types.define("many", input=int, output=int, entry=True)


@dataclass
class Renewals:
    """Counts the renewals the state adapter's transactions send (each job's renewal once)."""

    sent: int = 0
    at_cancel: int | None = None
    """Renewals sent by the time the cancel had committed."""
    seen_by_handler: list[tuple[AbortReason, int]] = field(default_factory=list)
    """(reason, renewals sent) when the handler's signal fired; the signal may fire before
    ``at_cancel`` is noted (a notification is quicker than the canceller's next step)."""
    renewing: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by the first renewal sent."""
    signalled: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the handler saw its signal fire."""

    def between(self) -> int:
        """Renewals sent after the cancel committed and before the handler's signal fired."""
        [(_reason, sent)] = self.seen_by_handler
        assert self.at_cancel is not None
        return max(0, sent - self.at_cancel)


async def count_renewals(client: Client, monkeypatch: pytest.MonkeyPatch) -> Renewals:
    renewals = Renewals()
    async with client.state.transaction(read_only=True) as tx:
        cls = type(tx)
    renew = cls.job_renew_lease

    async def counted(self: Any, params: Any) -> Any:
        renewals.sent += 1
        renewals.renewing.set()
        return await renew(self, params)

    monkeypatch.setattr(cls, "job_renew_lease", counted)
    return renewals


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
async def client(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Client]:
    """A client without notifications: renewals are the only way news reaches an attempt."""
    if request.param == "memory":
        async with Client(MemoryStateAdapter(), None, types) as memory:
            yield memory
        return
    drop: Callable[[str], None] | None = None
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
    else:
        server = request.getfixturevalue("postgres_server")
        drop = request.getfixturevalue("drop_postgres_schema")
        schema = f"jc_cancel_{uuid.uuid4().hex[:12]}"
        url = f"{server}{'&' if '?' in server else '?'}schema={schema}"
    connected = await jobchain.connect(url, notify="none", job_types=types, migrate=True)
    try:
        yield connected
    finally:
        await connected.close()
        if drop is not None:
            drop(schema)


async def _cancel(client: Client, chain_ids: list[str], renewals: Renewals) -> None:
    async with client.transaction() as tx:
        await client.cancel_chains(tx, chain_ids, reason="no longer wanted")
    renewals.at_cancel = renewals.sent  # committed: every later renewal is refused


def _single_handler(running: asyncio.Event, renewals: Renewals) -> Processors:
    processors = Processors()

    @processors.handler(slow)
    async def handle(attempt: Attempt[int, int]) -> Completed:
        await attempt.prepare("staged")
        running.set()
        reason = await attempt.signal.wait()
        renewals.seen_by_handler.append((reason, renewals.sent))
        renewals.signalled.set()
        return await attempt.complete(0)  # refused: the job is cancelled

    return processors


async def test_the_renewal_after_a_cancel_stops_a_running_handler(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    renewals = await count_renewals(client, monkeypatch)
    running = asyncio.Event()
    processors = _single_handler(running, renewals)
    async with client.transaction() as tx:
        chain = await client.start_chain(tx, slow, 1)
    worker = Worker(client, processors, lease=RENEWING, poll_interval=0.05, heartbeat_interval=QUIET)
    async with worker:
        async with asyncio.timeout(BOUND):
            await running.wait()
            await renewals.renewing.wait()  # the renewal loop runs: the cancel lands between two renewals
        await _cancel(client, [chain.id], renewals)
        async with asyncio.timeout(BOUND):
            await renewals.signalled.wait()
    [(reason, _sent)] = renewals.seen_by_handler
    assert reason is AbortReason.CANCELLED
    assert renewals.between() <= 1, f"{renewals.between()} renewals between the cancel and the signal"


def _batch_handler(running: asyncio.Event, renewals: Renewals) -> Processors:
    processors = Processors()

    @processors.batch_handler(many, max_batch=2)
    async def handle(batch: Batch[int, int]) -> list[int]:
        assert len(batch) == 2, "both jobs in one batch"
        running.set()
        reason = await batch.signal.wait()
        renewals.seen_by_handler.append((reason, renewals.sent))
        renewals.signalled.set()
        return [0, 0]

    return processors


async def _two_jobs(client: Client) -> list[str]:
    async with client.transaction() as tx:
        return [(await client.start_chain(tx, many, i)).id for i in range(2)]


async def test_the_renewal_after_a_cancel_stops_a_batch_with_reason_cancelled(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    renewals = await count_renewals(client, monkeypatch)
    running = asyncio.Event()
    processors = _batch_handler(running, renewals)
    ids = await _two_jobs(client)  # before the worker starts: one claim takes both
    worker = Worker(client, processors, lease=RENEWING, poll_interval=0.05, heartbeat_interval=QUIET)
    async with worker:
        async with asyncio.timeout(BOUND):
            await running.wait()
            await renewals.renewing.wait()
        await _cancel(client, ids, renewals)
        async with asyncio.timeout(BOUND):
            await renewals.signalled.wait()
    [(reason, _sent)] = renewals.seen_by_handler
    assert reason is AbortReason.CANCELLED
    between = renewals.between()
    assert between <= 2, f"{between} renewals (two per round) between the cancel and the batch's signal"


async def test_with_notifications_a_cancel_stops_a_batch_without_a_renewal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types) as client:
        renewals = await count_renewals(client, monkeypatch)
        running = asyncio.Event()
        processors = _batch_handler(running, renewals)
        ids = await _two_jobs(client)
        worker = Worker(client, processors, lease=NOT_RENEWING, poll_interval=0.05, heartbeat_interval=QUIET)
        async with worker:
            async with asyncio.timeout(BOUND):
                await running.wait()
            await _cancel(client, ids, renewals)
            async with asyncio.timeout(BOUND):
                await renewals.signalled.wait()
        assert renewals.seen_by_handler == [(AbortReason.CANCELLED, 0)]  # no renewal at all


async def test_with_notifications_a_cancel_stops_a_single_attempt_without_a_renewal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types) as client:
        renewals = await count_renewals(client, monkeypatch)
        running = asyncio.Event()
        processors = _single_handler(running, renewals)
        async with client.transaction() as tx:
            chain = await client.start_chain(tx, slow, 1)
        worker = Worker(client, processors, lease=NOT_RENEWING, poll_interval=0.05, heartbeat_interval=QUIET)
        async with worker:
            async with asyncio.timeout(BOUND):
                await running.wait()
            await _cancel(client, [chain.id], renewals)
            async with asyncio.timeout(BOUND):
                await renewals.signalled.wait()
        assert renewals.seen_by_handler == [(AbortReason.CANCELLED, 0)]  # no renewal at all
