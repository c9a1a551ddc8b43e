"""Fan-out from a handler: ``attempt.client``, ``attempt.start_chain`` and ``attempt.start_chains``.

Atomic mode writes the started chains in the attempt's transaction (a failed attempt leaves
none, and a continuation blocked on them commits with them); staged mode commits them at
once, so a retry must deduplicate.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest

from jobchain import ChainStart, ChainStarted, Client, Deduplication, JobStatus, JobTypes
from jobchain.contracts import Event
from jobchain.errors import JobTypeValidationError, UnknownJobTypeError
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.worker import Attempt, Backoff, Completed, Processors, Worker

types = JobTypes()
part = types.define("fanout.part", input=int, output=int, entry=True)
merge = types.define("fanout.merge", input=None, output=int, blockers=[part])
split = types.define("fanout.split", input=int, output=int, entry=True, continues_with=[merge])
unregistered = JobTypes().define("fanout.elsewhere", input=int, output=int, entry=True)

NEVER_AGAIN = Backoff(initial=timedelta(hours=1), maximum=timedelta(hours=1))
AT_ONCE = Backoff(initial=timedelta(0), maximum=timedelta(0))
Handler = Callable[[Attempt[int, int]], Awaitable[Completed]]


class EventLog:
    """Records worker events; waits for one by name (no sleeping)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._changed = asyncio.Event()

    def on_event(self, event: Event) -> None:
        self.names.append(event.name)
        self._changed.set()

    async def wait_for(self, name: str, count: int = 1) -> None:
        async with asyncio.timeout(20):
            while self.names.count(name) < count:
                self._changed.clear()
                await self._changed.wait()


def base_processors() -> Processors:
    processors = Processors()

    @processors.handler(part)
    async def square(attempt: Attempt[int, int]) -> Completed:
        return await attempt.complete(attempt.input * attempt.input)

    @processors.handler(merge)
    async def add_up(attempt: Attempt[None, int]) -> Completed:
        return await attempt.complete(sum(chain.output for chain in await attempt.blockers()))

    return processors


@asynccontextmanager
async def running(split_handler: Handler, retry: Backoff) -> AsyncIterator[tuple[Client, EventLog]]:
    events = EventLog()
    client = Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types, observers=[events])
    processors = base_processors()
    processors.handler(split, retry=retry)(split_handler)
    async with client, Worker(client, processors, concurrency=4, poll_interval=0.05):
        yield client, events


async def start(client: Client, n: int) -> str:
    async with client.transaction() as tx:
        started = await client.start_chain(tx, split, n)
    return started.id


async def part_chains(client: Client) -> list[Any]:
    return list((await client.list_chains(type_names=[part])).items)


async def test_atomic_fan_out_continues_with_a_job_blocked_on_the_started_chains() -> None:
    seen: dict[str, object] = {}

    async def fan_out(attempt: Attempt[int, int]) -> Completed:
        await attempt.prepare("atomic")
        seen["client"] = attempt.client
        started = await attempt.start_chains(
            [ChainStart(job_type=part, input=i) for i in range(attempt.input)]
        )
        one_more = await attempt.start_chain(part, 10)
        seen["transaction"] = attempt.transaction is not None
        return await attempt.continue_with(merge, None, blockers=[s.chain for s in [*started, one_more]])

    async with running(fan_out, NEVER_AGAIN) as (client, _):
        chain = await client.await_chain(await start(client, 4), timeout=20, poll_interval=0.05)
        assert chain.output == 0 + 1 + 4 + 9 + 100
        assert seen == {"client": client, "transaction": True}
        assert len(await part_chains(client)) == 5


async def test_atomic_fan_out_then_raise_leaves_no_blocker_chains() -> None:
    async def fan_out_then_fail(attempt: Attempt[int, int]) -> Completed:
        await attempt.prepare("atomic")
        await attempt.start_chains([ChainStart(job_type=part, input=i) for i in range(attempt.input)])
        raise RuntimeError("fails after fanning out")

    async with running(fan_out_then_fail, NEVER_AGAIN) as (client, events):
        root_id = await start(client, 3)
        await events.wait_for("job_attempt_failed")
        assert await part_chains(client) == []
        root = await client.get_job(root_id)
        assert root is not None
        assert root.status is JobStatus.PENDING
        assert "fails after fanning out" in (root.last_attempt_error or "")


async def test_atomic_fan_out_discards_the_wake_ups_of_rolled_back_chains() -> None:
    async def fan_out_then_fail(attempt: Attempt[int, int]) -> Completed:
        await attempt.prepare("atomic")
        await attempt.start_chain(part, 1)
        assert attempt.transaction is not None
        assert attempt.transaction.hooks.scheduled == {part.name: 1}  # buffered until commit
        raise RuntimeError("rolls back")

    async with running(fan_out_then_fail, NEVER_AGAIN) as (client, events):
        await start(client, 1)
        await events.wait_for("job_attempt_failed")
        assert "job_attempt_started" in events.names
        # Only the split job's own attempt ever started: no part job existed to be claimed.
        assert events.names.count("job_attempt_started") == 1


async def test_staged_fan_out_commits_at_once_and_a_retry_deduplicates() -> None:
    results: list[list[bool]] = []

    async def fan_out(attempt: Attempt[int, int]) -> Completed:
        await attempt.prepare("staged")
        assert attempt.transaction is None
        started = await attempt.start_chains(
            [
                ChainStart(
                    job_type=part,
                    input=i,
                    # scope "any": the first attempt's chains may have completed meanwhile.
                    deduplication=Deduplication(
                        key=f"{attempt.job.chain_id}:{i}", scope="any", window=timedelta(days=1)
                    ),
                )
                for i in range(attempt.input)
            ]
        )
        results.append([s.deduplicated for s in started])
        if attempt.job.attempt == 1:
            raise RuntimeError("fails after fanning out; the chains stay")
        return await attempt.continue_with(merge, None, blockers=[s.chain for s in started])

    async with running(fan_out, AT_ONCE) as (client, _):
        chain = await client.await_chain(await start(client, 3), timeout=20, poll_interval=0.05)
        assert chain.output == 0 + 1 + 4
        assert results == [[False, False, False], [True, True, True]]
        assert len(await part_chains(client)) == 3


async def test_staged_fan_out_without_deduplication_starts_again_on_retry() -> None:
    async def fan_out(attempt: Attempt[int, int]) -> Completed:
        await attempt.prepare("staged")
        started = await attempt.start_chain(part, attempt.job.attempt)
        if attempt.job.attempt == 1:
            raise RuntimeError("fails after fanning out")
        return await attempt.continue_with(merge, None, blockers=[started.chain])

    async with running(fan_out, AT_ONCE) as (client, _):
        chain = await client.await_chain(await start(client, 1), timeout=20, poll_interval=0.05)
        assert chain.output == 4  # the second attempt's blocker: 2 * 2
        assert sorted(c.root.input for c in await part_chains(client)) == [1, 2]  # at-least-once


async def test_start_chain_before_choosing_a_mode_selects_staged() -> None:
    modes: list[object] = []

    async def fan_out(attempt: Attempt[int, int]) -> Completed:
        started = await attempt.start_chain(part, 3)
        modes.append(attempt.mode)
        return await attempt.continue_with(merge, None, blockers=[started.chain])

    async with running(fan_out, NEVER_AGAIN) as (client, _):
        chain = await client.await_chain(await start(client, 0), timeout=20, poll_interval=0.05)
        assert chain.output == 9
        assert modes == ["staged"]


@pytest.mark.parametrize("mode", ["atomic", "staged"])
async def test_bad_starts_raise_the_client_errors_and_write_nothing(mode: str) -> None:
    errors: list[type[BaseException]] = []

    async def fan_out(attempt: Attempt[int, int]) -> Completed:
        await attempt.prepare(mode)  # type: ignore[arg-type] -- parametrized literal
        for bad in (
            lambda: attempt.start_chain(part, "not a number"),  # type: ignore[arg-type] -- bad on purpose
            lambda: attempt.start_chain(unregistered, 1),
            lambda: attempt.start_chain(merge, None),  # not an entry type
        ):
            try:
                await bad()
            except Exception as error:
                errors.append(type(error))
        return await attempt.complete(len(errors))

    async with running(fan_out, NEVER_AGAIN) as (client, _):
        chain = await client.await_chain(await start(client, 0), timeout=20, poll_interval=0.05)
        assert chain.output == 3
        assert errors[0] is JobTypeValidationError
        assert errors[1] is UnknownJobTypeError
        assert issubclass(errors[2], JobTypeValidationError)
        assert await part_chains(client) == []


async def test_start_chains_returns_chain_started_in_order() -> None:
    got: list[ChainStarted] = []

    async def fan_out(attempt: Attempt[int, int]) -> Completed:
        await attempt.prepare("atomic")
        got.extend(await attempt.start_chains([ChainStart(job_type=part, input=i) for i in (5, 6, 7)]))
        assert await attempt.start_chains([]) == []
        return await attempt.complete(0)

    async with running(fan_out, NEVER_AGAIN) as (client, _):
        await client.await_chain(await start(client, 0), timeout=20, poll_interval=0.05)
        assert [s.chain.root.input for s in got] == [5, 6, 7]
        assert all(isinstance(s, ChainStarted) and not s.deduplicated for s in got)
