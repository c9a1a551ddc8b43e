"""A presumed-dead worker stays dead (issue 35, deliver 3, the worker's side).

When its heartbeat learns it was presumed dead (another worker released its jobs), the worker
aborts its in-flight handlers (their jobs belong to someone else now), forgets its buffered
jobs, logs the documented WARNING, and rejoins under a new incarnation: a late heartbeat of
the old incarnation can no longer bring its row back. Times are injected; heartbeats are sent
by hand; nothing waits on the wall clock.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

import pytest

from jobchain import JobTypes
from jobchain.client import Client
from jobchain.contracts import WorkerHeartbeat, WorkersList
from jobchain.entities import WorkerState
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.testing import FrozenClock
from jobchain.worker import AbortReason, Attempt, Completed, Processors, Worker
from jobchain.worker.backoff import LeaseConfig

BOUND = 30.0


def _rescuer(now: datetime) -> WorkerHeartbeat:
    return WorkerHeartbeat(
        worker_id="rescuer",
        name="rescuer",
        host="h",
        pid=1,
        version="t",
        type_names=["slow"],
        concurrency=1,
        inflight=0,
        state=WorkerState.RUNNING,
        alive_for=timedelta(hours=1),
        release_dead=True,
        now=now,
    )


async def test_a_worker_presumed_dead_aborts_its_attempts_warns_and_rejoins(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FrozenClock(datetime(2026, 12, 1, tzinfo=UTC))
    types = JobTypes()
    slow = types.define("slow", input=int, output=int, entry=True)
    state = MemoryStateAdapter(clock=clock)
    client = Client(state, MemoryNotifyAdapter(clock=clock), types, clock=clock)
    running = asyncio.Event()
    reasons: list[AbortReason] = []
    aborted = asyncio.Event()
    processors = Processors()

    @processors.handler(slow)
    async def handle(attempt: Attempt[int, int]) -> Completed:
        await attempt.prepare("staged")
        running.set()
        reasons.append(await attempt.signal.wait())
        aborted.set()
        return await attempt.complete(1)

    async with client.transaction() as tx:
        started = await client.start_chain(tx, slow, 1)
    # Heartbeats are sent by hand here (a day apart, so the timer never sends one).
    # Renewals an hour apart: only the heartbeat's news can abort the handler here.
    lease = LeaseConfig(duration=timedelta(hours=2), renew_every=timedelta(hours=1))
    worker = Worker(
        client, processors, concurrency=1, poll_interval=0.05, heartbeat_interval=86400, lease=lease
    )
    await worker.start()
    try:
        async with asyncio.timeout(BOUND):
            await running.wait()
        # The worker stalls; its row's alive_until passes and another worker rescues its job.
        clock.advance(timedelta(days=30))
        async with state.transaction() as tx:
            rescued = await tx.worker_heartbeat(_rescuer(clock()))
        assert [job.id for job in rescued.released_jobs] == [started.id]

        with caplog.at_level(logging.WARNING, logger="jobchain.worker"):
            result = await worker._heartbeat.beat()
        assert result is not None
        assert result.was_dead
        assert any("presumed dead" in record.getMessage() for record in caplog.records)
        async with asyncio.timeout(BOUND):
            await aborted.wait()
        assert reasons == [AbortReason.TAKEN_BY_ANOTHER_WORKER]

        # The next heartbeat rejoins under a new incarnation: the row is running again.
        rejoined = await worker._heartbeat.beat()
        assert rejoined is not None
        assert not rejoined.was_dead
        async with state.transaction(read_only=True) as tx:
            rows = {row.id: row for row in await tx.workers_list(WorkersList())}
        assert rows[worker.worker_id].state is WorkerState.RUNNING
    finally:
        await worker.stop()
