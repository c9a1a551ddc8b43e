"""Limits under stalls (issue 35, deliver 5): a worker whose heartbeats stop getting through
treats every job as lost once others may presume it dead.

Another worker's heartbeat releases a dead worker's jobs whatever their leases, once its row's
``alive_until`` has passed. So the worker counts a liveness deadline from its last confirmed
heartbeat's *sending* time (less the safety margin): past it, its handlers' signals read as
fired (``lease_expired``), and it claims and starts nothing until a heartbeat gets through. A
cooperative handler (one that stops on abort) of a ``max_running=1`` type has stopped before
its successor starts. One frozen clock drives the database and the worker's monotonic clock;
heartbeats hang at a gate; nothing waits on the wall clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from jobchain import JobTypes
from jobchain.client import Client
from jobchain.contracts import WorkerHeartbeat, WorkersList
from jobchain.entities import WorkerState
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.testing import FrozenClock
from jobchain.worker import AbortReason, Attempt, Completed, Processors, Worker
from jobchain.worker.backoff import LeaseConfig
from jobchain.worker.local_deadline import safety_margin

BOUND = 30.0
EPOCH = datetime(2026, 12, 1, tzinfo=UTC)
BEAT = 10.0
MISSED = 3
ALIVE_FOR = BEAT * MISSED
# Leases far longer than the stall, renewed often: only the liveness deadline can stop a handler.
LEASE = LeaseConfig(duration=timedelta(hours=2), renew_every=timedelta(milliseconds=50))


class GatedHeartbeats(MemoryStateAdapter):
    """Heartbeats of the workers in ``hang`` get no answer until they leave it."""

    def __init__(self, clock: FrozenClock) -> None:
        super().__init__(clock=clock)
        self.hang: set[str] = set()
        self.answered: dict[str, int] = {}
        self._changed = asyncio.Condition()

    async def heartbeats_answered(self, worker_id: str, count: int) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self.answered.get(worker_id, 0) >= count)

    async def release(self, worker_id: str) -> None:
        async with self._changed:
            self.hang.discard(worker_id)
            self._changed.notify_all()

    def transaction(self, *, read_only: bool = False, connection: object | None = None) -> Any:
        opened = super().transaction(read_only=read_only, connection=connection)
        owner = self

        class Wrapped:
            async def __aenter__(self) -> Any:
                tx = await opened.__aenter__()
                heartbeat = tx.worker_heartbeat

                async def worker_heartbeat(params: WorkerHeartbeat) -> Any:
                    async with owner._changed:
                        await owner._changed.wait_for(lambda: params.worker_id not in owner.hang)
                    result = await heartbeat(params)
                    async with owner._changed:
                        owner.answered[params.worker_id] = owner.answered.get(params.worker_id, 0) + 1
                        owner._changed.notify_all()
                    return result

                tx.worker_heartbeat = worker_heartbeat
                return tx

            async def __aexit__(self, *exc: Any) -> Any:
                return await opened.__aexit__(*exc)

        return Wrapped()


def monotonic_of(clock: FrozenClock) -> Any:
    """The worker's monotonic clock, moving with the database's."""
    return lambda: (clock() - EPOCH).total_seconds()


def rescuer(now: datetime) -> WorkerHeartbeat:
    return WorkerHeartbeat(
        worker_id="rescuer",
        name="rescuer",
        host="h",
        pid=1,
        version="t",
        type_names=["limited"],
        concurrency=1,
        inflight=0,
        state=WorkerState.RUNNING,
        alive_for=timedelta(hours=1),
        release_dead=True,
        now=now,
    )


async def until(done: Callable[[], bool]) -> None:
    async with asyncio.timeout(BOUND):
        while not done():  # noqa: ASYNC110 -- set by the worker's tasks, no event to wait on
            await asyncio.sleep(0.01)


async def rows(state: MemoryStateAdapter) -> dict[str, WorkerState]:
    async with state.transaction(read_only=True) as tx:
        return {row.id: row.state for row in await tx.workers_list(WorkersList())}


async def test_a_stalled_worker_stops_its_handler_before_its_successor_starts() -> None:
    clock = FrozenClock(EPOCH)
    types = JobTypes()
    limited = types.define("limited", input=int, output=int, entry=True, max_running=1)
    state = GatedHeartbeats(clock)
    client = Client(state, MemoryNotifyAdapter(clock=clock), types, clock=clock)
    active: set[str] = set()
    overlaps: list[str] = []
    reasons: list[AbortReason] = []
    first_running = asyncio.Event()
    stopped = asyncio.Event()
    successor_ran = asyncio.Event()
    processors = Processors()

    @processors.handler(limited)
    async def handle(attempt: Attempt[int, int]) -> Completed:
        await attempt.prepare("staged")
        if active:
            overlaps.append(f"{attempt.worker_id} started while {sorted(active)} ran")
        active.add(attempt.worker_id)
        try:
            if attempt.worker_id == stalled.worker_id:
                first_running.set()
                reasons.append(await attempt.signal.wait())  # cooperative: stops on abort
                stopped.set()
                attempt.signal.raise_if_aborted()
            successor_ran.set()
            return await attempt.complete(attempt.input)
        finally:
            active.discard(attempt.worker_id)

    async with client.transaction() as tx:
        started = await client.start_chain(tx, limited, 1)
    stalled = Worker(
        client,
        processors,
        name="stalled",
        concurrency=1,
        poll_interval=0.05,
        heartbeat_interval=BEAT,
        missed_heartbeats=MISSED,
        lease=LEASE,
    )
    stalled.monotonic = monotonic_of(clock)
    await stalled.start()
    try:
        async with asyncio.timeout(BOUND):
            await state.heartbeats_answered(stalled.worker_id, 1)
            await first_running.wait()
        state.hang.add(stalled.worker_id)  # from now on its heartbeats get no answer

        # Past the local liveness deadline, before the row's alive_until: nobody may release
        # the job yet, and the handler has already been told to stop.
        clock.advance(ALIVE_FOR - safety_margin(ALIVE_FOR) / 2)
        async with asyncio.timeout(BOUND):
            await stopped.wait()
        assert reasons == [AbortReason.LEASE_EXPIRED]
        assert (await rows(state))[stalled.worker_id] is WorkerState.RUNNING
        await until(lambda: stalled.liveness_lapses > 0)  # the watch reports the lapse once

        # Now the row lapses and another worker's heartbeat releases the job to a successor.
        clock.advance(safety_margin(ALIVE_FOR))
        async with state.transaction() as tx:
            released = await tx.worker_heartbeat(rescuer(clock()))
        assert [job.id for job in released.released_jobs] == [started.id]
        async with Worker(client, processors, name="successor", concurrency=1, poll_interval=0.05):
            async with asyncio.timeout(BOUND):
                await successor_ran.wait()
            chain = await client.await_chain(started.id, timeout=BOUND)
        assert chain.output == 1
        assert overlaps == []
        assert stalled.liveness_lapses == 1
        assert stalled.inflight_job_ids == []
    finally:
        await state.release(stalled.worker_id)
        await stalled.stop()


async def test_a_lapsed_worker_starts_nothing_until_a_heartbeat_gets_through() -> None:
    clock = FrozenClock(EPOCH)
    types = JobTypes()
    echo = types.define("echo", input=int, output=int, entry=True)
    state = GatedHeartbeats(clock)
    client = Client(state, MemoryNotifyAdapter(clock=clock), types, clock=clock)
    ran: list[int] = []
    processors = Processors()

    @processors.handler(echo)
    async def handle(attempt: Attempt[int, int]) -> Completed:
        ran.append(attempt.input)
        return await attempt.complete(attempt.input)

    worker = Worker(
        client,
        processors,
        concurrency=1,
        poll_interval=0.05,
        heartbeat_interval=BEAT,
        missed_heartbeats=MISSED,
        lease=LEASE,
    )
    worker.monotonic = monotonic_of(clock)
    await worker.start()
    try:
        async with asyncio.timeout(BOUND):
            await state.heartbeats_answered(worker.worker_id, 1)
        state.hang.add(worker.worker_id)
        clock.advance(ALIVE_FOR)
        async with client.transaction() as tx:
            started = await client.start_chain(tx, echo, 7)
        # Several polls go by (each a claim chance) while no heartbeat gets through.
        await until(lambda: worker.liveness_lapses > 0)
        for _ in range(10):
            await asyncio.sleep(0.06)
        assert ran == []
        pending = await client.get_chain(started.id)
        assert pending is not None
        assert pending.status.value == "pending"

        await state.release(worker.worker_id)  # the heartbeat in flight answers now
        chain = await client.await_chain(started.id, timeout=BOUND)
        assert chain.output == 7
        assert ran == [7]
    finally:
        await state.release(worker.worker_id)
        await worker.stop()


async def test_a_handler_resumed_past_the_liveness_deadline_reads_its_signal_as_fired() -> None:
    """After a stall the handler's continuation may run before the liveness watch: a handler
    that never staged (no lease watch of its own) still sees the abort at once."""
    clock = FrozenClock(EPOCH)
    types = JobTypes()
    echo = types.define("echo", input=int, output=int, entry=True)
    state = GatedHeartbeats(clock)
    client = Client(state, MemoryNotifyAdapter(clock=clock), types, clock=clock)
    seen: list[tuple[bool, AbortReason | None]] = []
    processors = Processors()

    @processors.handler(echo)
    async def handle(attempt: Attempt[int, int]) -> Completed:
        clock.advance(ALIVE_FOR)  # the process stalled for the whole alive_for
        seen.append((attempt.signal.aborted, attempt.signal.reason))  # no await in between
        return await attempt.complete(attempt.input)

    worker = Worker(
        client,
        processors,
        concurrency=1,
        poll_interval=0.05,
        heartbeat_interval=BEAT,
        missed_heartbeats=MISSED,
        lease=LEASE,
    )
    worker.monotonic = monotonic_of(clock)
    await worker.start()
    try:
        async with asyncio.timeout(BOUND):
            await state.heartbeats_answered(worker.worker_id, 1)
        state.hang.add(worker.worker_id)
        async with client.transaction() as tx:
            await client.start_chain(tx, echo, 1)
        await until(lambda: bool(seen))
        assert seen == [(True, AbortReason.LEASE_EXPIRED)]
    finally:
        await state.release(worker.worker_id)
        await worker.stop()
