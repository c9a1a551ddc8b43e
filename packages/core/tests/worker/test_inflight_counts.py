"""A worker's in-flight count is the jobs it runs or buffers now (issue 36, deliver 3).

A shop's ``jobchain workers --json`` and dashboard showed ``inflight`` 9-10 and "Busy 15 of 8
slots" for a worker with concurrency 8 that held 1-4 running jobs: a returned handler's slot
takes the next job while the attempt's commit is still being written (up to ``concurrency``
such commits), and ``inflight`` counted those commits too, so it reached twice the slots
(plus prefetch); attempts whose outcome had committed, or whose job was cancelled under them,
still counted while their tasks finished.

Now the heartbeat reports what the worker holds — claimed, leased to it, outcome not yet
written — in two parts: ``inflight``, the jobs it runs or buffers, never more than
``concurrency + prefetch`` (its ``capacity``), and ``committing``, the attempts whose commit
is being written. The moments are the test's own: handlers wait on events, commits wait at a
gate of a state proxy, heartbeats are sent by hand. Nothing waits on the wall clock.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jobchain import Client, JobStatus, JobTypes, WorkerInfo
from jobchain.contracts import JobComplete, JobsAcquire
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.worker import AbortReason, Attempt, Completed, Processors, Worker

BOUND = 30.0
"""Seconds a step may take on a starved machine before the test gives up (never a timing)."""
CONCURRENCY = 8

types = JobTypes()
order = types.define("shop.order", input=int, output=int, entry=True)


class GatedCommits(MemoryStateAdapter):
    """While :attr:`gate` is closed, every transaction that completes a job waits at its commit
    (:attr:`entered` is set once one does). Counts the jobs claimed."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()
        self.entered = asyncio.Event()
        self.claimed = 0
        self._claims = asyncio.Event()

    async def claimed_at_least(self, count: int) -> None:
        while self.claimed < count:
            self._claims.clear()
            await self._claims.wait()

    def transaction(self, *, read_only: bool = False, connection: object | None = None) -> Any:
        opened = super().transaction(read_only=read_only, connection=connection)
        owner = self

        class Wrapped:
            completes = False

            async def __aenter__(self) -> Any:
                tx: Any = await opened.__aenter__()
                complete, acquire = tx.job_complete, tx.jobs_acquire
                wrapped = self

                async def job_complete(params: JobComplete) -> Any:
                    wrapped.completes = True
                    return await complete(params)

                async def jobs_acquire(params: JobsAcquire) -> Any:
                    claimed = await acquire(params)
                    owner.claimed += len(claimed.jobs)
                    owner._claims.set()
                    return claimed

                tx.job_complete = job_complete
                tx.jobs_acquire = jobs_acquire
                return tx

            async def __aexit__(self, *exc: Any) -> Any:
                if self.completes and exc[0] is None and not owner.gate.is_set():
                    owner.entered.set()
                    await owner.gate.wait()
                return await opened.__aexit__(*exc)

        return Wrapped()


class Arrivals:
    """Handlers that have started; each waits on an event of its own until the test sets it."""

    def __init__(self) -> None:
        self.holds: list[asyncio.Event] = []
        self._changed = asyncio.Event()
        self.opened = False
        """Set by :meth:`open`: handlers arriving from then on do not wait."""

    def arrive(self) -> asyncio.Event:
        hold = asyncio.Event()
        if self.opened:
            hold.set()
        self.holds.append(hold)
        self._changed.set()
        return hold

    async def reach(self, count: int) -> None:
        while len(self.holds) < count:
            self._changed.clear()
            await self._changed.wait()

    def release(self, count: int | None = None) -> None:
        for hold in self.holds[:count]:
            hold.set()

    def open(self) -> None:
        """Release every handler, those still to come too."""
        self.opened = True
        self.release()


async def _start(client: Client, count: int) -> list[str]:
    async with client.transaction() as tx:
        started = [await client.start_chain(tx, order, n) for n in range(count)]
    return [s.id for s in started]


async def _reported(worker: Worker) -> WorkerInfo:
    """Send a heartbeat now; the registry row it wrote."""
    assert await worker._heartbeat.beat() is not None
    [row] = [row for row in await worker.client.list_workers() if row.id == worker.worker_id]
    return row


async def _held(client: Client, worker: Worker) -> int:
    """Jobs the database says this worker holds: running, leased to it."""
    page = await client.list_jobs(statuses=["running"], leased_by=[worker.worker_id], limit=100)
    return len(page.items)


@pytest.mark.parametrize("prefetch", [0, 2])
async def test_inflight_never_exceeds_concurrency_plus_prefetch_and_commits_are_reported_apart(
    prefetch: int,
) -> None:
    state = GatedCommits()
    client = Client(state, MemoryNotifyAdapter(), types)
    ids = await _start(client, 3 * CONCURRENCY)
    arrivals = Arrivals()
    seen: list[int] = []  # what the worker would report, as each handler starts
    processors = Processors()

    @processors.handler(order)
    async def handle(attempt: Attempt[int, int]) -> Completed:
        # A plain completion first: written with the group commit when the handler returns.
        completed = await attempt.complete(attempt.input)
        hold = arrivals.arrive()
        seen.append(worker.load.inflight)
        await hold.wait()
        return completed

    capacity = CONCURRENCY + prefetch
    worker = Worker(
        client,
        processors,
        concurrency=CONCURRENCY,
        prefetch=prefetch,
        poll_interval=60,
        heartbeat_interval=86400,  # heartbeats by hand only (the first one at start aside)
    )
    async with worker:
        try:
            async with asyncio.timeout(BOUND):
                await arrivals.reach(CONCURRENCY)
                await state.claimed_at_least(capacity)
            # Every slot runs a handler, the buffer is full.
            row = await _reported(worker)
            assert (row.inflight, row.buffered, row.committing, row.capacity) == (
                capacity,
                prefetch,
                0,
                capacity,
            )
            assert row.running == CONCURRENCY
            assert await _held(client, worker) == row.held == capacity

            # The database is slow: the handlers return, and their commits wait. Their slots run
            # the buffered jobs and what the worker claims next, up to its capacity again.
            state.gate.clear()
            arrivals.release(CONCURRENCY)
            async with asyncio.timeout(BOUND):
                await state.entered.wait()
                await arrivals.reach(2 * CONCURRENCY)
                await state.claimed_at_least(2 * CONCURRENCY + prefetch)
            row = await _reported(worker)
            held = await _held(client, worker)
            assert row.inflight <= row.capacity == capacity, f"reported {row.inflight} of {row.capacity}"
            assert (row.inflight, row.running, row.buffered) == (capacity, CONCURRENCY, prefetch)
            assert row.committing == CONCURRENCY
            # The database holds them all for this worker: those it runs or buffers, and those
            # whose commit it is writing.
            assert held == row.held == 2 * CONCURRENCY + prefetch

            # The commits land: the worker takes new jobs up to what it may hold, never more.
            state.gate.set()
            arrivals.open()
            for job_id in ids:
                await client.await_chain(job_id, timeout=BOUND, poll_interval=0.05)
        finally:
            state.gate.set()
            arrivals.open()
    assert len(seen) == len(ids)
    assert max(seen) <= capacity, f"the worker held {max(seen)} jobs, more than {capacity}"
    assert worker.load.inflight == 0


async def test_an_attempt_whose_outcome_committed_no_longer_counts() -> None:
    """A staged attempt's completion committed; it still unsubscribes from ownership-loss
    notifications (a round trip to the broker) before its task ends: it holds nothing then."""
    unsubscribing = asyncio.Event()
    unsubscribe_gate = asyncio.Event()

    class SlowUnsubscribe(MemoryNotifyAdapter):
        async def listen_job_ownership_lost(self, job_id: str, listener: Any) -> Any:
            unsubscribe = await super().listen_job_ownership_lost(job_id, listener)

            async def slow() -> None:
                unsubscribing.set()
                await unsubscribe_gate.wait()
                await unsubscribe()

            return slow

    client = Client(MemoryStateAdapter(), SlowUnsubscribe(), types)
    [job_id] = await _start(client, 1)
    processors = Processors()

    @processors.handler(order)
    async def handle(attempt: Attempt[int, int]) -> Completed:
        await attempt.prepare("staged")
        return await attempt.complete(attempt.input)

    worker = Worker(client, processors, concurrency=2, poll_interval=60, heartbeat_interval=86400)
    async with worker:
        try:
            async with asyncio.timeout(BOUND):
                await unsubscribing.wait()
            job = await client.get_job(job_id)
            assert job is not None
            assert job.status is JobStatus.COMPLETED
            assert worker.inflight_job_ids == [job_id]  # its task still runs
            row = await _reported(worker)
            assert (row.inflight, row.buffered) == (0, 0), "a job whose completion committed still counts"
        finally:
            unsubscribe_gate.set()


async def test_an_attempt_whose_job_was_cancelled_no_longer_counts() -> None:
    """The chain is cancelled while its handler runs on, ignoring its abort signal for a while:
    the job is no longer the worker's (the database says cancelled), so it does not count."""
    client = Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types)
    [job_id] = await _start(client, 1)
    started, aborted, finish = asyncio.Event(), asyncio.Event(), asyncio.Event()
    reasons: list[AbortReason] = []
    processors = Processors()

    @processors.handler(order)
    async def handle(attempt: Attempt[int, int]) -> Completed:
        await attempt.prepare("staged")
        started.set()
        reasons.append(await attempt.signal.wait())
        aborted.set()
        await finish.wait()  # slow to stop: its task still runs
        return await attempt.complete(attempt.input)

    worker = Worker(client, processors, concurrency=2, poll_interval=60, heartbeat_interval=86400)
    async with worker:
        try:
            async with asyncio.timeout(BOUND):
                await started.wait()
            assert (await _reported(worker)).inflight == 1
            async with client.transaction() as tx:
                await client.cancel_chain(tx, job_id)
            async with asyncio.timeout(BOUND):
                await aborted.wait()
            assert reasons == [AbortReason.CANCELLED]
            assert worker.inflight_job_ids == [job_id]
            row = await _reported(worker)
            assert row.inflight == await _held(client, worker) == 0, "a cancelled job still counts"
        finally:
            finish.set()
