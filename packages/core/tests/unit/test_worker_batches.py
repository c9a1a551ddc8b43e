"""Batch processors: one handler call for many jobs of one type, each job decided on its own."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta

import pytest

from jobchain import ChainStart, Client, Job, JobStatus, JobTypes, Schedule
from jobchain.contracts import Event
from jobchain.errors import InvalidArgumentError, RescheduleJobError
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.testing import FrozenClock
from jobchain.worker import Batch, LeaseConfig, Processors, Worker


@dataclass
class Item:
    n: int


types = JobTypes()
item = types.define("batch.item", input=Item, output=int, entry=True)
single = types.define("batch.single", input=Item, output=int, entry=True)


def _client() -> Client:
    return Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types)


async def _start(client: Client, count: int, job_type: object = item) -> list[str]:
    async with client.transaction() as tx:
        started = await client.start_chains(
            tx,
            [ChainStart(job_type=job_type, input=Item(n=i)) for i in range(count)],  # type: ignore[arg-type]
        )
    return [s.id for s in started]


async def _settled(client: Client, chain_id: str) -> Job:
    """The chain's job once its first attempt has ended (completed or handed back)."""
    async with asyncio.timeout(10):
        while True:
            chain = await client.get_chain(chain_id)
            assert chain is not None
            job = chain.last
            if job.status is JobStatus.COMPLETED or (job.attempt >= 1 and job.status is JobStatus.PENDING):
                return job
            await asyncio.sleep(0.02)


async def test_jobs_arrive_together_and_each_gets_its_output() -> None:
    client = _client()
    ids = await _start(client, 25)
    sizes: list[int] = []
    processors = Processors()

    @processors.batch_handler(item, max_batch=10)
    async def handle(batch: Batch[Item, int]) -> list[int]:
        sizes.append(len(batch))
        assert [job.input for job in batch.jobs] == [{"n": i.n} for i in batch.inputs]
        return [i.n * 2 for i in batch.inputs]

    async with Worker(client, processors, concurrency=2, poll_interval=0.05):
        chains = [await client.await_chain(chain_id, timeout=10, poll_interval=0.05) for chain_id in ids]
    assert [c.output for c in chains] == [2 * i for i in range(25)]
    assert sum(sizes) == 25
    assert max(sizes) == 10
    assert len(sizes) <= 5, sizes


async def test_an_exception_in_a_jobs_place_reschedules_that_job_alone() -> None:
    client = _client()
    ids = await _start(client, 4)
    processors = Processors()

    @processors.batch_handler(item)
    async def handle(batch: Batch[Item, int]) -> list[int | BaseException]:
        return [
            ValueError(f"item {i.n} is bad")
            if i.n == 1
            else RescheduleJobError(Schedule(after=timedelta(hours=1)), "later")
            if i.n == 2
            else i.n
            for i in batch.inputs
        ]

    async with Worker(client, processors, poll_interval=60):
        jobs = [await _settled(client, chain_id) for chain_id in ids]
    assert [j.status for j in jobs] == [
        JobStatus.COMPLETED,
        JobStatus.PENDING,
        JobStatus.PENDING,
        JobStatus.COMPLETED,
    ]
    assert jobs[1].last_attempt_error is not None
    assert "item 1 is bad" in jobs[1].last_attempt_error
    assert jobs[2].last_attempt_error == "later"
    assert jobs[2].scheduled_at - jobs[0].completed_at > timedelta(minutes=59)  # type: ignore[operator]


async def test_a_handler_that_raises_reschedules_the_whole_batch() -> None:
    client = _client()
    ids = await _start(client, 3)
    processors = Processors()

    @processors.batch_handler(item)
    async def handle(batch: Batch[Item, int]) -> list[int]:
        raise RuntimeError("the downstream API is down")

    async with Worker(client, processors, poll_interval=60):
        jobs = [await _settled(client, chain_id) for chain_id in ids]
    for job in jobs:
        assert job.status is JobStatus.PENDING
        assert job.last_attempt_error is not None
        assert "downstream API is down" in job.last_attempt_error


async def test_a_result_of_the_wrong_length_says_what_to_return_and_completes_nothing() -> None:
    client = _client()
    ids = await _start(client, 3)
    processors = Processors()

    @processors.batch_handler(item)
    async def handle(batch: Batch[Item, int]) -> list[int]:
        return [1]

    async with Worker(client, processors, poll_interval=60):
        jobs = [await _settled(client, chain_id) for chain_id in ids]
    for job in jobs:
        assert job.status is JobStatus.PENDING
        assert job.last_attempt_error is not None
        assert "got 3 jobs and returned 1 entries" in job.last_attempt_error
        assert "one output (or exception) per job" in job.last_attempt_error


async def test_an_output_that_does_not_fit_the_type_fails_only_its_job() -> None:
    client = _client()
    ids = await _start(client, 2)
    processors = Processors()

    @processors.batch_handler(item)
    async def handle(batch: Batch[Item, int]) -> list[object]:
        return [object() if i.n == 0 else i.n for i in batch.inputs]

    async with Worker(client, processors, poll_interval=60):
        first, second = [await _settled(client, chain_id) for chain_id in ids]
    assert first.status is JobStatus.PENDING
    assert second.status is JobStatus.COMPLETED


async def test_a_synchronous_batch_handler_runs_in_a_thread() -> None:
    client = _client()
    ids = await _start(client, 5)
    processors = Processors()

    def handle(batch: Batch[Item, int]) -> list[int]:
        return [i.n + 100 for i in batch.inputs]

    processors.register_batch(item, handle)
    async with Worker(client, processors, poll_interval=0.05):
        chains = [await client.await_chain(chain_id, timeout=10, poll_interval=0.05) for chain_id in ids]
    assert [c.output for c in chains] == [100 + i for i in range(5)]


async def test_batch_and_single_handlers_share_a_worker() -> None:
    client = _client()
    batched = await _start(client, 6)
    singles = await _start(client, 4, single)
    processors = Processors()

    @processors.batch_handler(item, max_batch=4)
    async def handle_batch(batch: Batch[Item, int]) -> list[int]:
        return [i.n for i in batch.inputs]

    @processors.handler(single)
    async def handle_one(attempt: object) -> object:
        return await attempt.complete(-1)  # type: ignore[attr-defined]

    async with Worker(client, processors, concurrency=2, prefetch=4, poll_interval=0.05):
        done = [await client.await_chain(c, timeout=10, poll_interval=0.05) for c in batched + singles]
    assert [c.output for c in done] == [0, 1, 2, 3, 4, 5, -1, -1, -1, -1]


async def test_shutdown_fires_the_batch_signal_and_hands_the_jobs_back() -> None:
    client = _client()
    ids = await _start(client, 3)
    started = asyncio.Event()
    processors = Processors()

    @processors.batch_handler(item)
    async def handle(batch: Batch[Item, int]) -> list[int]:
        started.set()
        await batch.signal.wait()
        batch.signal.raise_if_aborted()
        return []

    worker = Worker(client, processors, poll_interval=60, shutdown_timeout=0.1)
    await worker.start()
    await asyncio.wait_for(started.wait(), 10)
    assert sorted(worker.inflight_job_ids) == sorted(ids)
    await worker.stop()
    for chain_id in ids:
        chain = await client.get_chain(chain_id)
        assert chain is not None
        assert chain.last.status is JobStatus.PENDING
        assert chain.last.last_attempt_error is not None
        assert "worker shut down" in chain.last.last_attempt_error


def test_register_batch_checks_its_arguments() -> None:
    processors = Processors()
    with pytest.raises(InvalidArgumentError, match="max_batch must be a positive integer"):
        processors.register_batch(item, lambda batch: [], max_batch=0)
    with pytest.raises(InvalidArgumentError, match="must be callable"):
        processors.register_batch(item, "not a function")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="without middleware"):
        Processors(middleware=[object()]).register_batch(item, lambda batch: [])


QUIET_HEARTBEAT = 600.0
"""Heartbeat interval (s) of workers whose clock the test moves: their registry rows stay alive
for half an hour of it, so no worker is presumed dead however far the test moves it."""


async def test_a_long_batch_keeps_its_leases_and_no_other_worker_runs_its_jobs() -> None:
    # Leases are judged on a clock that moves only when the test moves it, in steps shorter
    # than a lease, each once every lease was renewed at the current time: only renewals keep
    # the jobs ours (after two steps the first leases are over), and however slowly the machine
    # runs, no lease expires while its renewals keep up.
    clock = FrozenClock()
    client = Client(MemoryStateAdapter(clock=clock), MemoryNotifyAdapter(), types, clock=clock)
    ids = await _start(client, 4)
    lease = LeaseConfig(duration=timedelta(seconds=30), renew_every=timedelta(milliseconds=50))
    step = lease.duration * 2 / 3
    calls: Counter[str] = Counter()
    running, finish = asyncio.Event(), asyncio.Event()
    processors = Processors()

    @processors.batch_handler(item, lease=lease)
    async def handle(batch: Batch[Item, int]) -> list[int]:
        for job in batch.jobs:
            calls[job.id] += 1
        running.set()
        await finish.wait()
        return [i.n for i in batch.inputs]

    async def renewed_at_current_time() -> None:
        try:
            async with asyncio.timeout(10):
                while True:
                    jobs = [await client.get_job(job_id) for job_id in ids]
                    leases = [job.leased_until for job in jobs if job is not None]
                    if len(leases) == len(ids) and all(
                        u is not None and u >= clock() + lease.duration for u in leases
                    ):
                        return
                    await asyncio.sleep(0.01)
        except TimeoutError:
            pytest.fail("the batch's leases were not renewed")

    first = Worker(client, processors, name="first", poll_interval=0.05, heartbeat_interval=QUIET_HEARTBEAT)
    second = Worker(client, processors, name="second", poll_interval=0.05, heartbeat_interval=QUIET_HEARTBEAT)
    async with first, second:
        await asyncio.wait_for(running.wait(), 10)
        try:
            for _ in range(6):  # four lease lengths
                await renewed_at_current_time()
                clock.advance(step)
        finally:
            finish.set()
        chains = [await client.await_chain(chain_id, timeout=10, poll_interval=0.05) for chain_id in ids]
    assert [c.output for c in chains] == [0, 1, 2, 3]
    assert set(calls.values()) == {1}
    assert len({c.last.completed_by for c in chains}) == 1


class Events:
    """An observer that keeps every event; ``lost`` is set by the first ``job_attempt_not_found``."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.lost = asyncio.Event()

    def on_event(self, event: Event) -> None:
        self.events.append(event)
        if event.name == "job_attempt_not_found":
            self.lost.set()

    def named(self, name: str) -> list[Event]:
        return [event for event in self.events if event.name == name]


async def test_a_job_lost_during_its_batch_is_not_completed_by_it() -> None:
    events = Events()
    client = Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types, observers=[events])
    ids = await _start(client, 3)
    # Renewed every 50 ms, and long enough that no busy machine lets it lapse.
    lease = LeaseConfig(duration=timedelta(seconds=30), renew_every=timedelta(milliseconds=50))
    processors = Processors()

    @processors.batch_handler(item, lease=lease)
    async def handle(batch: Batch[Item, int]) -> list[int]:
        async with client.transaction() as tx:
            await client.delete_chains(tx, [ids[1]])
        # A renewal round notices the deleted job before the batch returns.
        await asyncio.wait_for(events.lost.wait(), 10)
        return [i.n for i in batch.inputs]

    async with Worker(client, processors, poll_interval=0.05):
        kept = [await client.await_chain(ids[i], timeout=10, poll_interval=0.05) for i in (0, 2)]
    assert [c.output for c in kept] == [0, 2]
    assert await client.get_chain(ids[1]) is None
    assert [e.attributes["job.id"] for e in events.named("job_attempt_not_found")] == [ids[1]]
