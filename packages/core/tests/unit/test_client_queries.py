"""Client reads on the in-process adapters: get, list with filters and pages, await_chain."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobchain import (
    ChainNotFoundError,
    ChainStart,
    Client,
    Completion,
    InvalidArgumentError,
    InvalidCursorError,
    JobStatus,
    JobTypeMismatchError,
    JobTypes,
    WaitChainTimeoutError,
)
from jobchain.contracts.notify import Listener, Unsubscribe
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter

START = datetime(2030, 1, 1, tzinfo=UTC)


class FakeClock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class CountingNotify(MemoryNotifyAdapter):
    """The real in-process adapter, counting live chain-completed subscriptions."""

    live = 0

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.subscribed = asyncio.Event()

    async def listen_chain_completed(self, chain_id: str, listener: Listener) -> Unsubscribe:
        inner = await super().listen_chain_completed(chain_id, listener)
        self.live += 1
        self.subscribed.set()

        async def unsubscribe() -> None:
            self.live -= 1
            await inner()

        return unsubscribe


@dataclass
class Step:
    n: int


types = JobTypes()
child = types.define("child", input=Step, output=int)
parent = types.define("parent", input=Step, output=int, entry=True)
other = types.define("other", input=Step, output=int, entry=True)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def notify(clock: FakeClock) -> CountingNotify:
    return CountingNotify(clock=clock)


@pytest.fixture
async def client(clock: FakeClock, notify: CountingNotify) -> AsyncIterator[Client]:
    async with Client(MemoryStateAdapter(clock=clock), notify, types, clock=clock) as c:
        yield c


async def start_many(client: Client, clock: FakeClock, job_type: Any, count: int) -> list[str]:
    ids = []
    for n in range(count):
        async with client.transaction() as tx:
            ids.append((await client.start_chain(tx, job_type, Step(n))).id)
        clock.advance(1)
    return ids


async def complete(client: Client, job_type: Any, chain_id: str, output: Any) -> None:
    async def handler(step: Completion[Any, Any]) -> None:
        await step.complete(output)

    async with client.transaction() as tx:
        await client.complete_chain(tx, job_type, chain_id, handler)


async def continue_to_child(client: Client, chain_id: str) -> None:
    async def handler(step: Completion[Any, Any]) -> None:
        await step.continue_with(child, Step(99))

    async with client.transaction() as tx:
        await client.complete_chain(tx, parent, chain_id, handler)


class TestGet:
    async def test_get_chain_and_job_check_the_type(self, client: Client, clock: FakeClock) -> None:
        [chain_id] = await start_many(client, clock, parent, 1)
        chain = await client.get_chain(chain_id, job_type=parent)
        assert chain is not None
        assert chain.id == chain_id
        job = await client.get_job(chain_id, job_type="parent")
        assert job is not None
        assert job.chain_id == chain_id
        with pytest.raises(JobTypeMismatchError):
            await client.get_chain(chain_id, job_type=other)
        with pytest.raises(JobTypeMismatchError):
            await client.get_job(chain_id, job_type=child)
        assert await client.get_chain("2f1c7a52-2a53-4d51-9a0e-6cbb1d3c1a11") is None

    async def test_reads_inside_a_transaction_see_its_uncommitted_writes(self, client: Client) -> None:
        async with client.transaction() as tx:
            started = await client.start_chain(tx, parent, Step(1))
            assert await client.get_chain(started.id, tx=tx) == started.chain
            assert [c.id for c in (await client.list_chains(tx=tx)).items] == [started.id]


class TestListChains:
    async def test_filters(self, client: Client, clock: FakeClock) -> None:
        parents = await start_many(client, clock, parent, 3)
        [lone] = await start_many(client, clock, other, 1)
        await complete(client, parent, parents[0], 1)
        await continue_to_child(client, parents[1])
        async with client.transaction() as tx:
            blocked = await client.start_chain(tx, other, Step(0), blockers=[parents[2]])

        async def ids(**filters: Any) -> set[str]:
            return {c.id for c in (await client.list_chains(**filters)).items}

        assert await ids(type_names=[parent]) == set(parents)
        assert await ids(type_names=["other"]) == {lone, blocked.id}
        assert await ids(statuses=[JobStatus.COMPLETED]) == {parents[0]}
        assert await ids(statuses=["pending"]) == {parents[1], parents[2], lone}  # parents[1] via its child
        assert await ids(statuses=["blocked"]) == {blocked.id}
        assert await ids(chain_ids=[parents[0], lone]) == {parents[0], lone}
        child_id = (await client.list_chain_jobs(parents[1])).items[1].id
        assert await ids(job_ids=[child_id]) == {parents[1]}
        assert parents[2] not in await ids(root_only=True)
        assert await ids(
            created_from=START + timedelta(seconds=1), created_to=START + timedelta(seconds=2)
        ) == {
            parents[1],
            parents[2],
        }

    async def test_pages_cover_every_chain_once_in_order(self, client: Client, clock: FakeClock) -> None:
        created = await start_many(client, clock, parent, 5)
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            page = await client.list_chains(limit=2, cursor=cursor)
            seen += [c.id for c in page.items]
            pages += 1
            cursor = page.next_cursor
            if cursor is None:
                break
        assert seen == list(reversed(created))  # newest first by default
        assert pages == 3
        ascending = await client.list_chains(order="asc", limit=50)
        assert [c.id for c in ascending.items] == created
        assert ascending.next_cursor is None

    async def test_a_cursor_from_another_query_is_refused(self, client: Client, clock: FakeClock) -> None:
        await start_many(client, clock, parent, 3)
        page = await client.list_chains(limit=1)
        assert page.next_cursor is not None
        with pytest.raises(InvalidCursorError, match="different query"):
            await client.list_chains(limit=1, cursor=page.next_cursor, statuses=["pending"])
        with pytest.raises(InvalidCursorError):
            await client.list_jobs(limit=1, cursor=page.next_cursor)


class TestListJobs:
    async def test_filters_and_chain_jobs(self, client: Client, clock: FakeClock) -> None:
        [a, b] = await start_many(client, clock, parent, 2)
        await continue_to_child(client, a)
        jobs = await client.list_jobs(chain_ids=[a])
        assert [j.type_name for j in jobs.items] == ["child", "parent"]  # newest first
        assert [j.chain_id for j in (await client.list_jobs(type_names=[child])).items] == [a]
        assert {j.chain_id for j in (await client.list_jobs(chain_type_names=["parent"])).items} == {a, b}
        assert [j.id for j in (await client.list_jobs(statuses=["completed"])).items] == [a]
        assert [j.id for j in (await client.list_jobs(job_ids=[b])).items] == [b]
        chain_jobs = await client.list_chain_jobs(a, job_type=parent)
        assert [j.chain_index for j in chain_jobs.items] == [0, 1]
        with pytest.raises(JobTypeMismatchError):
            await client.list_chain_jobs(a, job_type=other)

    async def test_blocked_jobs_and_blockers(self, client: Client, clock: FakeClock) -> None:
        [blocker] = await start_many(client, clock, parent, 1)
        async with client.transaction() as tx:
            started = await client.start_chains(
                tx, [ChainStart(job_type=other, input=Step(n), blockers=[blocker]) for n in range(3)]
            )
        page = await client.list_blocked_jobs(blocker, limit=2)
        assert len(page.items) == 2
        assert page.next_cursor is not None
        rest = await client.list_blocked_jobs(blocker, limit=2, cursor=page.next_cursor)
        assert {j.id for j in page.items + rest.items} == {s.id for s in started}
        assert [c.id for c in await client.get_job_blockers(started[0].id)] == [blocker]

    async def test_bad_filters_are_refused(self, client: Client) -> None:
        with pytest.raises(InvalidArgumentError, match="statuses must be among"):
            await client.list_jobs(statuses=["done"])
        with pytest.raises(InvalidArgumentError, match="must be a list"):
            await client.list_chains(type_names="parent")
        with pytest.raises(InvalidArgumentError, match="timezone-aware"):
            await client.list_chains(created_from=datetime(2030, 1, 1))


class TestAwaitChain:
    async def test_returns_a_completed_chain_at_once(self, client: Client, clock: FakeClock) -> None:
        [chain_id] = await start_many(client, clock, parent, 1)
        await complete(client, parent, chain_id, 7)
        chain = await client.await_chain(chain_id, timeout=5)
        assert chain.output == 7

    async def test_wakes_on_the_completion_notification(
        self, client: Client, clock: FakeClock, notify: CountingNotify
    ) -> None:
        [chain_id] = await start_many(client, clock, parent, 1)
        # The poll interval exceeds the timeout: only the notification can end the wait in time.
        waiter = asyncio.create_task(client.await_chain(chain_id, timeout=30, poll_interval=3600))
        await notify.subscribed.wait()
        await complete(client, parent, chain_id, 3)
        chain = await waiter
        assert chain.status is JobStatus.COMPLETED
        assert notify.live == 0

    async def test_polls_when_there_is_no_notify(self, clock: FakeClock) -> None:
        async with Client(MemoryStateAdapter(clock=clock), None, types, clock=clock) as client:
            [chain_id] = await start_many(client, clock, parent, 1)
            waiter = asyncio.create_task(client.await_chain(chain_id, timeout=30, poll_interval=0.01))
            await asyncio.sleep(0)
            await complete(client, parent, chain_id, 3)
            assert (await waiter).output == 3

    async def test_times_out_with_a_typed_error(
        self, client: Client, clock: FakeClock, notify: CountingNotify
    ) -> None:
        [chain_id] = await start_many(client, clock, parent, 1)
        with pytest.raises(WaitChainTimeoutError) as info:
            await client.await_chain(chain_id, timeout=0.05, poll_interval=0.01)
        assert (info.value.chain_id, info.value.timeout) == (chain_id, 0.05)
        assert notify.live == 0

    async def test_missing_or_deleted_chain_raises_not_found(
        self, client: Client, clock: FakeClock, notify: CountingNotify
    ) -> None:
        with pytest.raises(ChainNotFoundError):
            await client.await_chain("2f1c7a52-2a53-4d51-9a0e-6cbb1d3c1a11", timeout=5)
        [chain_id] = await start_many(client, clock, parent, 1)
        waiter = asyncio.create_task(client.await_chain(chain_id, timeout=30, poll_interval=0.01))
        await notify.subscribed.wait()
        async with client.transaction() as tx:
            await client.delete_chain(tx, chain_id)
        with pytest.raises(ChainNotFoundError):
            await waiter
        assert notify.live == 0

    async def test_wrong_type_raises_mismatch(self, client: Client, clock: FakeClock) -> None:
        [chain_id] = await start_many(client, clock, parent, 1)
        with pytest.raises(JobTypeMismatchError):
            await client.await_chain(chain_id, job_type=other, timeout=5)

    async def test_cancellation_propagates_and_unsubscribes(
        self, client: Client, clock: FakeClock, notify: CountingNotify
    ) -> None:
        [chain_id] = await start_many(client, clock, parent, 1)
        waiter = asyncio.create_task(client.await_chain(chain_id, timeout=30, poll_interval=3600))
        await notify.subscribed.wait()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert notify.live == 0

    @pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "5"])
    async def test_timeouts_must_be_positive_finite_numbers(self, client: Client, bad: Any) -> None:
        chain_id = "2f1c7a52-2a53-4d51-9a0e-6cbb1d3c1a11"
        with pytest.raises(InvalidArgumentError, match="timeout must be"):
            await client.await_chain(chain_id, timeout=bad)
        with pytest.raises(InvalidArgumentError, match="poll_interval must be"):
            await client.await_chain(chain_id, timeout=1, poll_interval=bad)
