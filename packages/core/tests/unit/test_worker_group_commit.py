"""Worker(group_commit=True): plain completions finishing together share one transaction.

A refused completion fails only its own attempt; a group whose transaction fails transiently
(an outage) is written again as one group; one that fails for any other reason is written
again one completion at a time; an exception after ``complete`` still leaves the job
uncompleted; completions that write more than themselves never join a group.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobchain import ChainStart, Client, Job, JobStatus, JobTypes
from jobchain.contracts import JobComplete, JobCompleted, JobGet, JobsAcquire
from jobchain.errors import (
    JobAlreadyCompletedError,
    JobchainError,
    JobTakenByAnotherWorkerError,
    TransientStateError,
)
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.worker import Attempt, Completed, Processors, Worker
from jobchain.worker.backoff import Backoff
from jobchain.worker.completer import CompletionGroups


@dataclass
class Item:
    n: int


@dataclass
class Doubled:
    n: int


types = JobTypes()
item = types.define("group.item", input=Item, output=Doubled, entry=True)


class CountingState(MemoryStateAdapter):
    """Counts write transactions and the job_complete calls made in each."""

    def __init__(self) -> None:
        super().__init__()
        self.completions_per_tx: list[int] = []
        self.fail_next_group = False
        self.fail_groups = 0  # transactions to fail transiently, as in an outage
        self.failure: type[Exception] = JobchainError

    @asynccontextmanager
    async def transaction(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async with super().transaction(*args, **kwargs) as tx:
            counter = [0]
            original = tx.job_complete
            fail = self.fail_next_group
            outage = self.fail_groups > 0

            async def job_complete(params: JobComplete) -> JobCompleted:
                counter[0] += 1
                if outage:
                    self.fail_groups -= 1
                    raise TransientStateError("injected: the connection to the database was lost")
                if fail and counter[0] == 2:
                    self.fail_next_group = False
                    raise self.failure("injected: the group's transaction failed")
                return await original(params)

            tx.job_complete = job_complete  # type: ignore[method-assign]
            yield tx
            if counter[0]:
                self.completions_per_tx.append(counter[0])


async def _start(client: Client, count: int) -> list[str]:
    async with client.transaction() as tx:
        started = await client.start_chains(
            tx, [ChainStart(job_type=item, input=Item(n=i)) for i in range(count)]
        )
    return [s.id for s in started]


class Arrivals:
    """Counts handlers reaching a point; ``all()`` waits until ``expected`` of them have."""

    def __init__(self, expected: int) -> None:
        self.count = 0
        self._expected = expected
        self._all = asyncio.Event()

    def arrive(self) -> None:
        self.count += 1
        if self.count >= self._expected:
            self._all.set()

    async def all(self) -> None:
        await asyncio.wait_for(self._all.wait(), 10)


def _processors(
    gate: asyncio.Event,
    *,
    raise_after: Collection[int] = frozenset(),
    at_gate: Arrivals | None = None,
) -> Processors:
    processors = Processors()

    @processors.handler(item)
    async def handle(attempt: Attempt[Item, Doubled]) -> Completed:
        completed = await attempt.complete(Doubled(n=attempt.input.n * 2))
        assert completed.job.status is JobStatus.COMPLETED
        if attempt.input.n in raise_after:
            raise RuntimeError("the handler failed after complete")
        if at_gate is not None:
            at_gate.arrive()
        await gate.wait()
        return completed

    return processors


async def test_completions_finishing_together_are_written_in_one_transaction() -> None:
    state = CountingState()
    client = Client(state, MemoryNotifyAdapter(), types)
    ids = await _start(client, 10)
    gate = asyncio.Event()
    at_gate = Arrivals(10)
    async with Worker(client, _processors(gate, at_gate=at_gate), concurrency=10, poll_interval=0.05):
        await at_gate.all()  # every handler has called complete and waits at the gate
        assert state.completions_per_tx == []  # nothing is written before the handlers return
        gate.set()
        chains = [await client.await_chain(chain_id, timeout=10, poll_interval=0.05) for chain_id in ids]
    assert sorted(c.output["n"] for c in chains) == [2 * i for i in range(10)]
    assert sum(state.completions_per_tx) == 10
    assert len(state.completions_per_tx) < 10, state.completions_per_tx


async def test_an_exception_after_complete_leaves_the_job_uncompleted() -> None:
    client = Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types)
    [chain_id] = await _start(client, 1)
    gate = asyncio.Event()
    gate.set()
    async with Worker(client, _processors(gate, raise_after={0}), poll_interval=60):
        job = await _after_first_attempt(client, chain_id)
    assert job.status is JobStatus.PENDING
    assert job.last_attempt_error is not None
    assert "failed after complete" in job.last_attempt_error


async def _after_first_attempt(client: Client, chain_id: str) -> Job:
    async with asyncio.timeout(10):
        while True:
            chain = await client.get_chain(chain_id)
            assert chain is not None
            if chain.last.attempt >= 1 and chain.last.status is not JobStatus.RUNNING:
                return chain.last
            await asyncio.sleep(0.02)


async def _claimed(
    state: MemoryStateAdapter, client: Client, count: int, lease: timedelta = timedelta(seconds=30)
) -> list[Any]:
    await _start(client, count)
    async with state.transaction() as tx:
        acquired = await tx.jobs_acquire(
            JobsAcquire(type_names=[item.name], worker_id="w", lease_for=lease, limit=count)
        )
    return acquired.jobs


async def test_a_refused_completion_fails_alone_and_the_rest_of_its_group_commits() -> None:
    state = CountingState()
    client = Client(state, MemoryNotifyAdapter(), types)
    jobs = await _claimed(state, client, 3)
    groups = CompletionGroups(client)
    now = datetime.now(UTC)
    results = await asyncio.gather(
        groups.complete(jobs[0], {"n": 0}, worker_id="w", now=now),
        groups.complete(jobs[1], {"n": 1}, worker_id="someone-else", now=now),
        groups.complete(jobs[2], {"n": 2}, worker_id="w", now=now),
        return_exceptions=True,
    )
    assert isinstance(results[1], JobTakenByAnotherWorkerError)
    assert [r.job.status for r in (results[0], results[2])] == [JobStatus.COMPLETED] * 2  # type: ignore[union-attr]
    assert results[0].job.completed_at == now  # type: ignore[union-attr]
    assert state.completions_per_tx == [3]


async def test_a_failed_group_is_written_again_one_completion_at_a_time() -> None:
    state = CountingState()
    client = Client(state, MemoryNotifyAdapter(), types)
    jobs = await _claimed(state, client, 3)
    groups = CompletionGroups(client)
    state.fail_next_group = True
    now = datetime.now(UTC)
    finished = await asyncio.gather(*(groups.complete(job, {"n": 0}, worker_id="w", now=now) for job in jobs))
    assert [f.job.status for f in finished] == [JobStatus.COMPLETED] * 3
    # The group's transaction got two completions in before failing; then one each.
    assert state.completions_per_tx[-3:] == [1, 1, 1]


async def test_a_group_failing_in_an_outage_is_written_again_as_one_group() -> None:
    state = CountingState()
    client = Client(state, MemoryNotifyAdapter(), types)
    jobs = await _claimed(state, client, 3)
    groups = CompletionGroups(client, outage_retry=Backoff(initial=timedelta(0)))
    state.fail_groups = 4  # four tries fail as the database is away, the fifth commits
    now = datetime.now(UTC)
    finished = await asyncio.gather(*(groups.complete(job, {"n": 0}, worker_id="w", now=now) for job in jobs))
    assert [f.job.status for f in finished] == [JobStatus.COMPLETED] * 3
    # Never one at a time: in an outage each would wait out the pool timeout on its own.
    assert state.completions_per_tx == [3]


async def test_an_outage_longer_than_the_lease_leaves_the_jobs_to_their_attempts() -> None:
    state = CountingState()
    client = Client(state, MemoryNotifyAdapter(), types)
    jobs = await _claimed(state, client, 2, lease=timedelta(milliseconds=50))
    groups = CompletionGroups(client, outage_retry=Backoff(initial=timedelta(milliseconds=10)))
    state.fail_groups = 1_000_000
    now = datetime.now(UTC)
    results = await asyncio.gather(
        *(groups.complete(job, {"n": 0}, worker_id="w", now=now) for job in jobs), return_exceptions=True
    )
    assert all(isinstance(result, TransientStateError) for result in results)
    assert state.completions_per_tx == []
    async with state.transaction(read_only=True) as tx:
        stored = [await tx.job_get(JobGet(job_id=job.id)) for job in jobs]
    assert [job.status for job in stored if job is not None] == [JobStatus.RUNNING] * 2


async def test_continuations_and_callbacks_do_not_join_a_group() -> None:
    state = CountingState()
    client = Client(state, MemoryNotifyAdapter(), types)
    ids = await _start(client, 4)
    processors = Processors()
    seen: list[bool] = []

    @processors.handler(item)
    async def handle(attempt: Attempt[Item, Doubled]) -> Completed:
        async def note(tx: Any) -> None:
            seen.append(tx is not None)

        return await attempt.complete(Doubled(n=attempt.input.n), callback=note)

    async with Worker(client, processors, concurrency=4, poll_interval=0.05):
        for chain_id in ids:
            await client.await_chain(chain_id, timeout=10, poll_interval=0.05)
    assert seen == [True] * 4
    assert state.completions_per_tx == [1, 1, 1, 1]


async def test_staged_completions_join_groups_and_complete_waits_for_the_commit() -> None:
    state = CountingState()
    client = Client(state, MemoryNotifyAdapter(), types)
    ids = await _start(client, 10)
    gate = asyncio.Event()
    staged = Arrivals(10)
    seen_completed: list[bool] = []
    processors = Processors()

    @processors.handler(item)
    async def handle(attempt: Attempt[Item, Doubled]) -> Completed:
        await attempt.prepare("staged")
        staged.arrive()
        await gate.wait()
        completed = await attempt.complete(Doubled(n=attempt.input.n * 2))
        # complete returned: the group holding this completion has committed.
        stored = await client.get_chain(attempt.job.chain_id)
        seen_completed.append(stored is not None and stored.last.status is JobStatus.COMPLETED)
        return completed

    async with Worker(client, processors, concurrency=10, poll_interval=0.05):
        await staged.all()  # every handler is staged and waits at the gate
        gate.set()
        chains = [await client.await_chain(chain_id, timeout=10, poll_interval=0.05) for chain_id in ids]
    assert sorted(c.output["n"] for c in chains) == [2 * i for i in range(10)]
    assert seen_completed == [True] * 10
    assert sum(state.completions_per_tx) == 10
    assert len(state.completions_per_tx) < 10, state.completions_per_tx


async def test_a_staged_handler_learns_a_refused_group_completion_from_complete() -> None:
    # No notify adapter: nothing tells the attempt its job was completed elsewhere, so the
    # refusal can only come back from the group's write.
    client = Client(MemoryStateAdapter(), None, types)
    [chain_id] = await _start(client, 1)
    staged = asyncio.Event()
    taken = asyncio.Event()
    errors: list[BaseException] = []
    refused = asyncio.Event()
    processors = Processors()

    @processors.handler(item)
    async def handle(attempt: Attempt[Item, Doubled]) -> Completed:
        await attempt.prepare("staged")
        staged.set()
        await taken.wait()
        try:
            return await attempt.complete(Doubled(n=1))
        except Exception as error:
            errors.append(error)
            refused.set()
            raise

    async def finish_elsewhere(completion: Any) -> None:
        await completion.complete(Doubled(n=-1))

    async with Worker(client, processors, poll_interval=0.05):
        await asyncio.wait_for(staged.wait(), 10)
        async with client.transaction() as tx:
            await client.complete_chain(tx, item, chain_id, finish_elsewhere)
        taken.set()
        chain = await client.await_chain(chain_id, timeout=10, poll_interval=0.05)
        await asyncio.wait_for(refused.wait(), 10)
    assert chain.output == {"n": -1}
    assert [type(e) for e in errors] == [JobAlreadyCompletedError]


async def test_a_returned_handler_frees_its_slot_while_its_completion_commits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = asyncio.Event()
    write_together = CompletionGroups._write_together

    async def held(self: CompletionGroups, group: list[Any]) -> list[Any]:
        await gate.wait()
        return await write_together(self, group)

    monkeypatch.setattr(CompletionGroups, "_write_together", held)
    client = Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types)
    ids = await _start(client, 10)
    ran: list[int] = []
    processors = Processors()

    @processors.handler(item)
    async def handle(attempt: Attempt[Item, Doubled]) -> Completed:
        ran.append(attempt.input.n)
        return await attempt.complete(Doubled(n=attempt.input.n))

    async with Worker(client, processors, concurrency=2, poll_interval=0.02):
        # Two handlers returned and wait for their commit; their slots ran two more, and with
        # four commits pending (twice the concurrency) the slots stay taken.
        async with asyncio.timeout(10):
            while len(ran) < 4:  # noqa: ASYNC110 -- appended by the worker's handlers, no event
                await asyncio.sleep(0.01)
        # A fifth would start within a poll interval or two; waiting longer only makes a
        # regression likelier to show, a correct worker never starts one.
        await asyncio.sleep(0.1)
        assert len(ran) == 4
        gate.set()
        chains = [await client.await_chain(chain_id, timeout=10, poll_interval=0.05) for chain_id in ids]
    assert sorted(c.output["n"] for c in chains) == list(range(10))
    assert sorted(ran) == list(range(10))


async def test_a_second_group_is_written_while_the_first_waits_for_its_commit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = CountingState()
    client = Client(state, MemoryNotifyAdapter(), types)
    jobs = await _claimed(state, client, 3)
    first_gate, first_writing = asyncio.Event(), asyncio.Event()
    writing: list[int] = []
    write_together = CompletionGroups._write_together

    async def slow_first(self: CompletionGroups, group: list[Any]) -> list[Any]:
        writing.append(len(group))
        if len(writing) == 1:
            first_writing.set()
            await first_gate.wait()
        return await write_together(self, group)

    monkeypatch.setattr(CompletionGroups, "_write_together", slow_first)
    groups = CompletionGroups(client, writers=2)
    now = datetime.now(UTC)
    first = asyncio.ensure_future(groups.complete(jobs[0], {"n": 0}, worker_id="w", now=now))
    await asyncio.wait_for(first_writing.wait(), 5)  # the first group is being written and waits
    later = [
        asyncio.ensure_future(groups.complete(job, {"n": 1}, worker_id="w", now=now)) for job in jobs[1:]
    ]
    done = await asyncio.wait_for(asyncio.gather(*later), 5)  # written while the first still waits
    assert not first.done()
    assert [f.job.status for f in done] == [JobStatus.COMPLETED] * 2
    assert writing == [1, 2]  # the two later completions shared the second writer's group
    first_gate.set()
    assert (await asyncio.wait_for(first, 5)).job.status is JobStatus.COMPLETED


class ClaimCountingState(MemoryStateAdapter):
    """Counts jobs_acquire calls, and job_next_available look-ups (a worker about to go idle)."""

    def __init__(self) -> None:
        super().__init__()
        self.claims = 0
        self.lookups = 0

    @asynccontextmanager
    async def transaction(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async with super().transaction(*args, **kwargs) as tx:
            acquire, look_up = tx.jobs_acquire, tx.job_next_available

            async def counted(params: Any) -> Any:
                self.claims += 1
                return await acquire(params)

            async def counted_look_up(params: Any) -> Any:
                self.lookups += 1
                return await look_up(params)

            tx.jobs_acquire = counted  # type: ignore[method-assign]
            tx.job_next_available = counted_look_up  # type: ignore[method-assign]
            yield tx

    async def idle(self, lookups: int) -> None:
        """Until the worker has looked up its next due job ``lookups`` times: it has claimed,
        found nothing more, and waits."""
        async with asyncio.timeout(10):
            while self.lookups < lookups:  # noqa: ASYNC110 -- counted in the worker's task, no event
                await asyncio.sleep(0.01)


async def test_an_idle_worker_makes_one_wake_claim_and_one_recheck_per_job() -> None:
    state = ClaimCountingState()
    client = Client(state, MemoryNotifyAdapter(), types)
    processors = Processors()

    @processors.handler(item)
    async def handle(attempt: Attempt[Item, Doubled]) -> Completed:
        return await attempt.complete(Doubled(n=attempt.input.n))

    async with Worker(client, processors, concurrency=1, poll_interval=30):
        await state.idle(1)  # the first claim finds nothing; the worker waits
        before = state.claims
        for n in range(5):
            [chain_id] = await _start(client, 1)
            await client.await_chain(chain_id, timeout=10, poll_interval=0.05)
            await state.idle(2 + n)  # after its re-check, the worker waits again
    # Per job: the claim of the woken worker, and one re-check once its slot freed.
    assert state.claims - before == 2 * 5


async def test_a_completion_queued_as_the_last_writer_finishes_is_still_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Regression: a writer left the writer set only in a done-callback, an iteration after it
    # returned; a completion queued in between found no free writer and waited forever.
    state = MemoryStateAdapter()
    client = Client(state, MemoryNotifyAdapter(), types)
    first, second = await _claimed(state, client, 2)
    wrote = asyncio.Event()
    write_together = CompletionGroups._write_together

    async def signal_after(self: CompletionGroups, group: list[Any]) -> list[Any]:
        results = await write_together(self, group)
        wrote.set()  # wakes the task below before the writer's own done-callbacks run
        return results

    monkeypatch.setattr(CompletionGroups, "_write_together", signal_after)
    groups = CompletionGroups(client, writers=1)
    now = datetime.now(UTC)

    async def queue_second_as_the_writer_finishes() -> Any:
        await wrote.wait()
        return await groups.complete(second, {"n": 2}, worker_id="w", now=now)

    late = asyncio.ensure_future(queue_second_as_the_writer_finishes())
    await groups.complete(first, {"n": 1}, worker_id="w", now=now)
    finished = await asyncio.wait_for(late, 5)
    assert finished.job.status is JobStatus.COMPLETED
