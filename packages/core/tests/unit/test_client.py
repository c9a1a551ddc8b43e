"""Client writes end to end on the in-process adapters: transactions, start, complete, trigger, delete."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import jobchain
from jobchain import (
    BlockerReferenceError,
    ChainNotFoundError,
    ChainStart,
    Client,
    Completion,
    Deduplication,
    InvalidArgumentError,
    JobAlreadyCompletedError,
    JobNotFoundError,
    JobNotTriggerableError,
    JobStatus,
    JobTypeMismatchError,
    JobTypes,
    JobTypeValidationError,
    Schedule,
    Transaction,
    TransactionRequiredError,
)
from jobchain.contracts.observe import Event
from jobchain.contracts.state import JobsAcquire
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter

START = datetime(2030, 1, 1, tzinfo=UTC)


class FakeClock:
    """A clock tests move by hand; shared by the client and both adapters."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class RecordingObserver:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)

    def names(self) -> list[str]:
        return [e.name for e in self.events]


@dataclass
class Fetch:
    url: str


@dataclass
class Parsed:
    words: int


types = JobTypes()
summarize = types.define("summarize", input=Parsed, output=str)
fetch = types.define("fetch", input=Fetch, output=None, entry=True, continues_with=[summarize])
report = types.define("report", input=dict[str, Any], output=int, entry=True, blockers=["fetch"])
free = types.define("free", input=int, output=int, entry=True)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def observer() -> RecordingObserver:
    return RecordingObserver()


@pytest.fixture
def notify(clock: FakeClock) -> MemoryNotifyAdapter:
    return MemoryNotifyAdapter(clock=clock)


@pytest.fixture
async def client(
    clock: FakeClock, notify: MemoryNotifyAdapter, observer: RecordingObserver
) -> AsyncIterator[Client]:
    async with Client(MemoryStateAdapter(clock=clock), notify, types, [observer], clock=clock) as c:
        yield c


async def listen_all(notify: MemoryNotifyAdapter, received: list[tuple[str, str]], **keys: str) -> None:
    await notify.listen_job_scheduled(list(types.names()), lambda t: received.append(("scheduled", t)))
    if "chain" in keys:
        await notify.listen_chain_completed(keys["chain"], lambda c: received.append(("completed", c)))
    if "job" in keys:
        await notify.listen_job_ownership_lost(keys["job"], lambda j: received.append(("lost", j)))


async def start(
    client: Client, job_type: Any = fetch, input: Any = None, **options: Any
) -> jobchain.ChainStarted:
    async with client.transaction() as tx:
        return await client.start_chain(
            tx, job_type, input if input is not None else Fetch("https://example.org"), **options
        )


async def finish(
    client: Client, chain_id: str, handler: Callable[[Completion[Any, Any]], Any]
) -> jobchain.Chain:
    async with client.transaction() as tx:
        return await client.complete_chain(tx, fetch, chain_id, handler)


async def complete_with(client: Client, job_type: Any, chain_id: str, output: Any) -> jobchain.Chain:
    async def handler(step: Completion[Any, Any]) -> None:
        await step.complete(output)

    async with client.transaction() as tx:
        return await client.complete_chain(tx, job_type, chain_id, handler)


async def start_then_fail(client: Client) -> None:
    async with client.transaction() as tx:
        await client.start_chain(tx, fetch, Fetch("u"))
        raise RuntimeError("domain write failed")


async def start_in_savepoint_then_fail(client: Client, tx: Transaction) -> None:
    async with tx.savepoint() as inner:
        await client.start_chain(inner, free, 1)
        raise ValueError("inner")


class TestTransaction:
    async def test_notifications_and_events_flush_only_after_commit(
        self, client: Client, notify: MemoryNotifyAdapter, observer: RecordingObserver
    ) -> None:
        received: list[tuple[str, str]] = []
        await listen_all(notify, received)
        async with client.transaction() as tx:
            await client.start_chain(tx, fetch, Fetch("u"))
            assert received == []
            assert observer.events == []
        assert received == [("scheduled", "fetch")]
        assert observer.names() == ["chain_created", "job_created"]
        assert await notify.consume_wake_hint("fetch") is True
        assert await notify.consume_wake_hint("fetch") is False  # budget of exactly one

    async def test_rollback_discards_writes_and_side_effects(
        self, client: Client, notify: MemoryNotifyAdapter, observer: RecordingObserver
    ) -> None:
        received: list[tuple[str, str]] = []
        await listen_all(notify, received)
        with pytest.raises(RuntimeError, match="domain write failed"):
            await start_then_fail(client)
        assert (await client.list_chains()).items == []
        assert received == []
        assert observer.events == []

    async def test_savepoint_rollback_discards_only_its_own_writes_and_side_effects(
        self, client: Client, notify: MemoryNotifyAdapter, observer: RecordingObserver
    ) -> None:
        received: list[tuple[str, str]] = []
        await listen_all(notify, received)
        async with client.transaction() as tx:
            kept = await client.start_chain(tx, fetch, Fetch("kept"))
            with pytest.raises(ValueError, match="inner"):
                await start_in_savepoint_then_fail(client, tx)
        chains = (await client.list_chains()).items
        assert [c.id for c in chains] == [kept.id]
        assert received == [("scheduled", "fetch")]
        assert [e.attributes.get("chain_type_name") for e in observer.events] == ["fetch", "fetch"]

    async def test_notify_failure_does_not_fail_the_committed_caller(
        self, client: Client, notify: MemoryNotifyAdapter, caplog: pytest.LogCaptureFixture
    ) -> None:
        await notify.close()  # every publish now raises AdapterClosedError
        with caplog.at_level(logging.WARNING, logger="jobchain.transactions"):
            started = await start(client)
        assert await client.get_chain(started.id) is not None
        assert any("notify failed" in r.getMessage() for r in caplog.records)

    async def test_writes_need_an_open_transaction_of_this_client(
        self, client: Client, clock: FakeClock
    ) -> None:
        other = Client(MemoryStateAdapter(clock=clock), None, types)
        async with other.transaction() as foreign:
            with pytest.raises(TransactionRequiredError, match=r"client\.transaction"):
                await client.start_chain(foreign, fetch, Fetch("u"))
        async with client.transaction() as tx:
            pass
        with pytest.raises(TransactionRequiredError):
            await client.start_chain(tx, fetch, Fetch("u"))
        with pytest.raises(TransactionRequiredError):
            await client.start_chain(None, fetch, Fetch("u"))  # type: ignore[arg-type]
        await other.close()

    async def test_connect_builds_a_client_from_urls(self) -> None:
        client = await jobchain.connect("memory://", notify="memory://", job_types=types)
        async with client:
            started = await start(client)
            assert (await client.get_chain(started.id)) is not None
            assert isinstance(client.notify, MemoryNotifyAdapter)
        assert client.notify.closed


class TestStartChain:
    async def test_start_creates_a_pending_root_job(self, client: Client, clock: FakeClock) -> None:
        started = await start(client, input=Fetch("https://a"))
        chain = started.chain
        assert not started.deduplicated
        assert chain.id == chain.root.id == chain.root.chain_id == chain.last.id
        assert chain.type_name == "fetch"
        assert chain.status is JobStatus.PENDING
        assert chain.root.input == {"url": "https://a"}
        assert chain.root.created_at == clock.now
        assert await client.get_chain(chain.id) == chain

    async def test_explicit_id_is_used(self, client: Client) -> None:
        chain_id = "2f1c7a52-2a53-4d51-9a0e-6cbb1d3c1a11"
        started = await start(client, id=chain_id)
        assert started.id == chain_id

    async def test_schedule_after_delays_the_job(self, client: Client, clock: FakeClock) -> None:
        started = await start(client, schedule=Schedule.in_seconds(90))
        assert started.chain.root.scheduled_at == clock.now + timedelta(seconds=90)

    async def test_incomplete_scope_returns_the_open_chain_then_allows_a_new_one(
        self, client: Client
    ) -> None:
        dedup = Deduplication(key="k")
        first = await start(client, job_type=free, input=1, deduplication=dedup)
        second = await start(client, job_type=free, input=2, deduplication=dedup)
        assert second.deduplicated
        assert second.id == first.id
        await complete_with(client, free, first.id, 10)
        third = await start(client, job_type=free, input=3, deduplication=dedup)
        assert not third.deduplicated
        assert third.id != first.id

    async def test_any_scope_matches_completed_chains_within_the_window(
        self, client: Client, clock: FakeClock
    ) -> None:
        dedup = Deduplication(key="k", scope="any", window=timedelta(minutes=5))
        first = await start(client, job_type=free, input=1, deduplication=dedup)
        await complete_with(client, free, first.id, 1)
        clock.advance(60)
        again = await start(client, job_type=free, input=1, deduplication=dedup)
        assert again.deduplicated
        assert again.id == first.id
        assert again.chain.status is JobStatus.COMPLETED
        clock.advance(300)
        later = await start(client, job_type=free, input=1, deduplication=dedup)
        assert not later.deduplicated

    async def test_excluded_chain_ids_are_not_matched(self, client: Client) -> None:
        first = await start(client, job_type=free, input=1, deduplication=Deduplication(key="k"))
        successor = await start(
            client, job_type=free, input=2, deduplication=Deduplication(key="k", exclude_chain_ids=[first.id])
        )
        assert not successor.deduplicated

    async def test_deduplicated_start_buffers_nothing(
        self, client: Client, notify: MemoryNotifyAdapter, observer: RecordingObserver
    ) -> None:
        await start(client, job_type=free, input=1, deduplication=Deduplication(key="k"))
        observer.events.clear()
        received: list[tuple[str, str]] = []
        await listen_all(notify, received)
        await start(client, job_type=free, input=1, deduplication=Deduplication(key="k"))
        assert received == []
        assert observer.events == []

    async def test_start_chains_keeps_order_and_collapses_equal_keys(self, client: Client) -> None:
        async with client.transaction() as tx:
            results = await client.start_chains(
                tx,
                [
                    ChainStart(job_type=free, input=1, deduplication=Deduplication(key="same")),
                    ChainStart(job_type=fetch, input=Fetch("x")),
                    ChainStart(job_type=free, input=2, deduplication=Deduplication(key="same")),
                ],
            )
            assert await client.start_chains(tx, []) == []
        assert [r.chain.type_name for r in results] == ["free", "fetch", "free"]
        assert [r.deduplicated for r in results] == [False, False, True]
        assert results[2].id == results[0].id
        assert len((await client.list_chains()).items) == 2


class TestBlockers:
    async def test_blocked_until_the_blocker_completes_through_workerless_completion(
        self, client: Client, notify: MemoryNotifyAdapter, observer: RecordingObserver
    ) -> None:
        blocker = await start(client)
        dependent = await start(client, job_type=report, input={"a": 1}, blockers=[blocker.chain])
        assert dependent.chain.status is JobStatus.BLOCKED
        assert "job_blocked" in observer.names()
        received: list[tuple[str, str]] = []
        await listen_all(notify, received, chain=blocker.id)

        async def continue_then_done(step: Completion[Any, Any]) -> None:
            await step.continue_with(summarize, Parsed(words=3))

        await finish(client, blocker.id, continue_then_done)
        assert (await client.get_chain(dependent.id)).status is JobStatus.BLOCKED  # type: ignore[union-attr]
        await complete_with(client, fetch, blocker.id, "three words")
        assert (await client.get_chain(dependent.id)).status is JobStatus.PENDING  # type: ignore[union-attr]
        assert ("completed", blocker.id) in received
        assert ("scheduled", "report") in received
        assert observer.names()[-3:] == ["job_completed", "chain_completed", "job_unblocked"]
        assert [c.id for c in await client.get_job_blockers(dependent.id)] == [blocker.id]

    async def test_blockers_may_be_chain_ids(self, client: Client) -> None:
        blocker = await start(client)
        dependent = await start(client, job_type=report, input={}, blockers=[blocker.id])
        assert dependent.chain.status is JobStatus.BLOCKED

    async def test_a_completed_blocker_does_not_block(self, client: Client) -> None:
        blocker = await start(client, job_type=free, input=1)
        await complete_with(client, free, blocker.id, 2)
        dependent = await start(client, job_type=free, input=3, blockers=[blocker.id])
        assert dependent.chain.status is JobStatus.PENDING


class TestCompleteChain:
    async def test_continue_with_then_complete_gives_the_chain_output(self, client: Client) -> None:
        started = await start(client)

        async def step_one(step: Completion[Any, Any]) -> None:
            assert step.input == Fetch("https://example.org")
            await step.continue_with(summarize, Parsed(words=2))

        chain = await finish(client, started.id, step_one)
        assert chain.status is JobStatus.PENDING
        assert chain.last.type_name == "summarize"
        assert chain.last.chain_index == 1
        assert chain.last.chain_type_name == "fetch"
        assert chain.root.status is JobStatus.COMPLETED
        done = await complete_with(client, fetch, started.id, "two words")
        assert done.status is JobStatus.COMPLETED
        assert done.output == "two words"
        assert done.last.completed_by is None

    async def test_missing_chain_and_wrong_type_are_errors(self, client: Client) -> None:
        started = await start(client)
        with pytest.raises(ChainNotFoundError):
            await complete_with(client, fetch, "2f1c7a52-2a53-4d51-9a0e-6cbb1d3c1a11", None)
        with pytest.raises(JobTypeMismatchError) as info:
            await complete_with(client, free, started.id, 1)
        assert (info.value.expected, info.value.actual) == ("free", "fetch")

    async def test_completing_a_completed_chain_raises(self, client: Client) -> None:
        started = await start(client, job_type=free, input=1)
        await complete_with(client, free, started.id, 2)
        with pytest.raises(JobAlreadyCompletedError):
            await complete_with(client, free, started.id, 3)

    async def test_a_read_only_handler_changes_nothing(self, client: Client) -> None:
        started = await start(client)
        seen: list[str] = []

        async def look(step: Completion[Any, Any]) -> None:
            seen.append(step.job.id)

        chain = await finish(client, started.id, look)
        assert seen == [started.id]
        assert chain == started.chain

    async def test_complete_may_be_called_once(self, client: Client) -> None:
        started = await start(client, job_type=free, input=1)

        async def twice(step: Completion[Any, Any]) -> None:
            await step.complete(1)
            with pytest.raises(InvalidArgumentError, match="only once"):
                await step.complete(2)

        async with client.transaction() as tx:
            chain = await client.complete_chain(tx, free, started.id, twice)
        assert chain.output == 1

    async def test_disallowed_continuation_writes_nothing(self, client: Client) -> None:
        started = await start(client)

        async def wrong(step: Completion[Any, Any]) -> None:
            with pytest.raises(JobTypeValidationError) as info:
                await step.continue_with(free, 1)
            assert info.value.code == "invalid_continuation"

        chain = await finish(client, started.id, wrong)
        assert chain == started.chain

    async def test_completing_a_running_job_tells_its_worker(
        self, client: Client, notify: MemoryNotifyAdapter
    ) -> None:
        started = await start(client, job_type=free, input=1)
        async with client.state.transaction() as state_tx:
            acquired = await state_tx.jobs_acquire(
                JobsAcquire(type_names=["free"], worker_id="w1", lease_for=timedelta(minutes=1))
            )
        assert [j.id for j in acquired.jobs] == [started.id]
        received: list[tuple[str, str]] = []
        await listen_all(notify, received, job=started.id)
        chain = await complete_with(client, free, started.id, 5)
        assert chain.status is JobStatus.COMPLETED
        assert ("lost", started.id) in received


class TestTrigger:
    async def test_trigger_makes_a_scheduled_job_eligible_now(
        self, client: Client, clock: FakeClock, notify: MemoryNotifyAdapter, observer: RecordingObserver
    ) -> None:
        started = await start(client, schedule=Schedule.in_seconds(3600))
        received: list[tuple[str, str]] = []
        await listen_all(notify, received)
        clock.advance(5)
        async with client.transaction() as tx:
            job = await client.trigger_job(tx, started.id)
        assert job.scheduled_at == clock.now
        assert received == [("scheduled", "fetch")]
        assert observer.names()[-1] == "job_triggered"

    async def test_trigger_is_all_or_nothing(self, client: Client, clock: FakeClock) -> None:
        pending = await start(client, schedule=Schedule.in_seconds(3600))
        done = await start(client, job_type=free, input=1)
        await complete_with(client, free, done.id, 1)
        missing = "2f1c7a52-2a53-4d51-9a0e-6cbb1d3c1a11"
        with pytest.raises(JobNotFoundError) as not_found:
            async with client.transaction() as tx:
                await client.trigger_jobs(tx, [pending.id, missing])
        assert not_found.value.job_id == missing
        with pytest.raises(JobNotTriggerableError) as stuck:
            async with client.transaction() as tx:
                await client.trigger_jobs(tx, [pending.id, done.id])
        assert (stuck.value.job_id, stuck.value.status) == (done.id, "completed")
        job = await client.get_job(pending.id)
        assert job is not None
        assert job.scheduled_at == START + timedelta(seconds=3600)
        async with client.transaction() as tx:
            assert await client.trigger_jobs(tx, []) == []


class TestDelete:
    async def test_delete_removes_the_chain(self, client: Client, observer: RecordingObserver) -> None:
        started = await start(client)
        async with client.transaction() as tx:
            deleted = await client.delete_chain(tx, started.id)
            assert await client.delete_chain(tx, "2f1c7a52-2a53-4d51-9a0e-6cbb1d3c1a11") is None
        assert deleted is not None
        assert deleted.id == started.id
        assert await client.get_chain(started.id) is None
        assert observer.names()[-1] == "chain_deleted"

    async def test_delete_refuses_a_chain_that_blocks_another_job(self, client: Client) -> None:
        blocker = await start(client)
        dependent = await start(client, job_type=report, input={}, blockers=[blocker.id])
        with pytest.raises(BlockerReferenceError) as info:
            async with client.transaction() as tx:
                await client.delete_chain(tx, blocker.id)
        assert [(r.chain_id, r.referenced_by_job_id) for r in info.value.references] == [
            (blocker.id, dependent.id)
        ]
        assert len((await client.list_chains()).items) == 2
        async with client.transaction() as tx:
            deleted = await client.delete_chains(tx, [blocker.id, dependent.id])
        assert {c.id for c in deleted} == {blocker.id, dependent.id}

    async def test_cascade_deletes_the_blockers_too(self, client: Client) -> None:
        blocker = await start(client)
        dependent = await start(client, job_type=report, input={}, blockers=[blocker.id])
        async with client.transaction() as tx:
            deleted = await client.delete_chains(tx, [dependent.id], cascade=True)
        assert {c.id for c in deleted} == {blocker.id, dependent.id}
        assert (await client.list_chains()).items == []

    async def test_deleting_a_running_chain_tells_its_worker(
        self, client: Client, notify: MemoryNotifyAdapter
    ) -> None:
        started = await start(client, job_type=free, input=1)
        async with client.state.transaction() as state_tx:
            await state_tx.jobs_acquire(
                JobsAcquire(type_names=["free"], worker_id="w", lease_for=timedelta(1))
            )
        received: list[tuple[str, str]] = []
        await listen_all(notify, received, job=started.id)
        async with client.transaction() as tx:
            await client.delete_chain(tx, started.id)
        assert received == [("lost", started.id)]
