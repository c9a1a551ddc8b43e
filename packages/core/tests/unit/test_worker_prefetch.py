"""Worker(prefetch=N): claimed jobs wait in a local buffer; each runs once; leftovers are released."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from jobchain import ChainStart, Client, InvalidArgumentError, JobStatus, JobTypes
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.worker import Attempt, Completed, Processors, Worker


@dataclass
class Item:
    n: int


types = JobTypes()
item = types.define("prefetch.item", input=Item, output=None, entry=True)


async def _start(client: Client, count: int) -> list[str]:
    async with client.transaction() as tx:
        starts = [ChainStart(job_type=item, input=Item(n=i)) for i in range(count)]
        started = await client.start_chains(tx, starts)
    return [s.id for s in started]


async def test_every_job_runs_exactly_once_and_never_more_than_concurrency_at_a_time() -> None:
    seen: list[int] = []
    running = 0
    peak = 0
    processors = Processors()

    @processors.handler(item)
    async def handle(attempt: Attempt[Item, None]) -> Completed:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await attempt.prepare("staged")
        await asyncio.sleep(0)
        seen.append(attempt.input.n)
        running -= 1
        return await attempt.complete(None)

    client = Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types)
    ids = await _start(client, 60)
    async with Worker(client, processors, concurrency=3, prefetch=5, poll_interval=0.05):
        for chain_id in ids:
            await client.await_chain(chain_id, timeout=10, poll_interval=0.05)
    assert sorted(seen) == list(range(60))
    assert peak <= 3


async def test_jobs_still_buffered_at_stop_are_handed_back_pending() -> None:
    gate = asyncio.Event()
    first = asyncio.Event()
    processors = Processors()

    @processors.handler(item)
    async def handle(attempt: Attempt[Item, None]) -> Completed:
        await attempt.prepare("staged")
        first.set()
        await gate.wait()
        return await attempt.complete(None)

    client = Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types)
    ids = await _start(client, 4)
    worker = Worker(client, processors, concurrency=1, prefetch=2, poll_interval=0.05)
    await worker.start()
    await asyncio.wait_for(first.wait(), 5)
    running = worker.inflight_job_ids
    gate.set()
    await worker.stop()
    jobs = {chain_id: await client.get_job(chain_id) for chain_id in ids}
    done = jobs[running[0]]
    assert done is not None
    assert done.status is JobStatus.COMPLETED
    others = [job for chain_id, job in jobs.items() if chain_id != running[0] and job is not None]
    assert all(job.status is JobStatus.PENDING and job.leased_by is None for job in others)
    # The two buffered jobs were claimed (attempt 1) and handed back at stop, not left until
    # their leases expired; the fourth was never claimed.
    assert sorted(job.attempt for job in others) == [0, 1, 1]


def test_prefetch_must_be_a_non_negative_integer() -> None:
    client = Client(MemoryStateAdapter(), None, types)
    processors = Processors()
    processors.register(item, lambda attempt: None)  # never runs
    with pytest.raises(InvalidArgumentError, match="prefetch"):
        Worker(client, processors, prefetch=-1)
