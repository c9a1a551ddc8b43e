"""Client lifecycle end to end on the in-process adapters, with a hand-moved clock: cancel,
retry, dead letters, starts against a failed blocker, and what each publishes after commit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobchain import (
    AttemptError,
    ChainFailedError,
    Client,
    Completion,
    JobFinishedError,
    JobNotRetryableError,
    JobStatus,
    JobTypes,
    Schedule,
)
from jobchain.completion import buffer_failed
from jobchain.contracts.observe import Event
from jobchain.contracts.state import JobFail, JobsAcquire
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter

START = datetime(2030, 1, 1, tzinfo=UTC)
LATER = Schedule(at=START + timedelta(hours=1))


@dataclass
class Item:
    n: int


types = JobTypes()
work = types.define("work", input=Item, output=int, entry=True)
needs = types.define("needs", input=Item, output=int, entry=True)
anyway = types.define("anyway", input=Item, output=int, entry=True, runs_after_failed_blockers=True)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.notices: list[tuple[str, str]] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)

    def names(self) -> list[str]:
        return [e.name for e in self.events]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def notify() -> MemoryNotifyAdapter:
    return MemoryNotifyAdapter()


@pytest.fixture
async def client(clock: Clock, notify: MemoryNotifyAdapter, recorder: Recorder) -> AsyncIterator[Client]:
    async with Client(MemoryStateAdapter(clock=clock), notify, types, [recorder], clock=clock) as c:
        yield c


async def listen(notify: MemoryNotifyAdapter, recorder: Recorder, chains: list[str], jobs: list[str]) -> None:
    await notify.listen_job_scheduled(
        list(types.names()), lambda t: recorder.notices.append(("scheduled", t))
    )
    for chain_id in chains:
        await notify.listen_chain_completed(chain_id, lambda c: recorder.notices.append(("finished", c)))
    for job_id in jobs:
        await notify.listen_job_ownership_lost(job_id, lambda j: recorder.notices.append(("lost", j)))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def start(client: Client, job_type: Any = work, n: int = 1, **options: Any) -> str:
    async with client.transaction() as tx:
        return (await client.start_chain(tx, job_type, Item(n), **options)).id


async def fail(client: Client, job_id: str, error_type: str = "ValueError", now: datetime = START) -> None:
    entry = AttemptError(attempt=0, worker_id=None, error_type=error_type, message="boom", at=now)
    async with client.transaction() as tx:
        failed = await tx.state.job_fail(JobFail(job_id=job_id, error="boom", attempt_error=entry, now=now))
        buffer_failed(tx.hooks, failed, worker_id=None)


async def status(client: Client, job_id: str) -> JobStatus:
    job = await client.get_job(job_id)
    assert job is not None
    return job.status


class TestCancel:
    async def test_a_running_blocker_tells_its_worker_and_finishes_every_affected_chain(
        self, client: Client, clock: Clock, notify: MemoryNotifyAdapter, recorder: Recorder
    ) -> None:
        blocker = await start(client)
        strict = await start(client, needs, 2, blockers=[blocker])
        tolerant = await start(client, anyway, 3, blockers=[blocker])
        async with client.transaction() as tx:
            acquired = await tx.state.jobs_acquire(
                JobsAcquire(type_names=["work"], worker_id="w1", lease_for=timedelta(seconds=30), now=START)
            )
        assert [j.id for j in acquired.jobs] == [blocker]
        await listen(notify, recorder, [blocker, strict, tolerant], [blocker])
        recorder.events.clear()
        clock.now = START + timedelta(seconds=5)

        async with client.transaction() as tx:
            [chain] = await client.cancel_chains(tx, [blocker, blocker], reason="stop")
        await settle()

        assert chain.last.cancelled_at == clock.now
        assert chain.last.cancel_reason == "stop"
        assert sorted(recorder.notices) == sorted(
            [("lost", blocker), ("finished", blocker), ("finished", strict), ("scheduled", "anyway")]
        )
        assert recorder.names() == [
            "job_cancelled",
            "chain_cancelled",
            "job_failed",
            "chain_failed",
            "job_unblocked",
        ]
        assert recorder.events[0].attributes["was_running"] is True
        assert await status(client, strict) is JobStatus.FAILED
        assert await status(client, tolerant) is JobStatus.PENDING


class TestCancelCascade:
    async def test_the_blockers_are_cancelled_their_workers_told_and_a_shared_one_left_out(
        self, client: Client, notify: MemoryNotifyAdapter, recorder: Recorder
    ) -> None:
        email = await start(client, work, 1)
        shared = await start(client, needs, 2)
        other = await start(client, needs, 3, blockers=[shared])
        order = await start(client, needs, 4, blockers=[email, shared])
        async with client.transaction() as tx:
            acquired = await tx.state.jobs_acquire(
                JobsAcquire(type_names=["work"], worker_id="w1", lease_for=timedelta(seconds=30), now=START)
            )
        assert [j.id for j in acquired.jobs] == [email]
        await listen(notify, recorder, [email, shared, order], [email])
        recorder.events.clear()

        async with client.transaction() as tx:
            report = await client.cancel_chains_cascading(tx, [order], reason="stop")
        await settle()

        assert ([j.id for j in report.cancelled], [j.id for j in report.cascaded]) == ([order], [email])
        assert (report.shared, report.running_job_ids, report.dry_run) == ([shared], [email], False)
        assert report.cascaded[0].cancel_reason == "stop"
        assert sorted(recorder.notices) == sorted([("lost", email), ("finished", email), ("finished", order)])
        assert recorder.names().count("chain_cancelled") == 2
        assert await status(client, shared) is JobStatus.PENDING
        assert await status(client, other) is JobStatus.BLOCKED

    async def test_include_shared_and_cancel_chains_with_cascade(self, client: Client) -> None:
        shared = await start(client, work, 1)
        other = await start(client, needs, 2, blockers=[shared])
        order = await start(client, needs, 3, blockers=[shared])
        async with client.transaction() as tx:
            [chain] = await client.cancel_chains(tx, [order], cascade=True, include_shared=True)
        assert (chain.id, chain.last.status) == (order, JobStatus.CANCELLED)
        assert await status(client, shared) is JobStatus.CANCELLED
        assert await status(client, other) is JobStatus.FAILED

    async def test_a_dry_run_publishes_and_changes_nothing(
        self, client: Client, notify: MemoryNotifyAdapter, recorder: Recorder
    ) -> None:
        email = await start(client, work, 1)
        order = await start(client, needs, 2, blockers=[email])
        await listen(notify, recorder, [email, order], [])
        recorder.events.clear()
        async with client.transaction() as tx:
            report = await client.cancel_chains_cascading(tx, [order], dry_run=True)
            chain = await client.cancel_chain(tx, order, cascade=True, dry_run=True)
        await settle()
        assert [(j.id, j.status) for j in report.cascaded] == [(email, JobStatus.CANCELLED)]
        assert report.dry_run is True
        assert (chain.id, chain.last.status) == (order, JobStatus.CANCELLED)
        assert (recorder.notices, recorder.names()) == ([], [])
        assert await status(client, email) is JobStatus.PENDING
        assert await status(client, order) is JobStatus.BLOCKED


class TestStartAgainstAFailedBlocker:
    async def test_the_new_chain_fails_at_once_and_its_waiter_raises(
        self, client: Client, notify: MemoryNotifyAdapter, recorder: Recorder
    ) -> None:
        blocker = await start(client, schedule=LATER)
        await fail(client, blocker)
        recorder.events.clear()
        async with client.transaction() as tx:
            started = await client.start_chain(tx, needs, Item(2), blockers=[blocker])
            await listen(notify, recorder, [started.id], [])
        await settle()
        assert started.chain.status is JobStatus.FAILED
        assert started.chain.last.failed_by_chain_id == blocker
        assert recorder.notices == [("finished", started.id)]
        assert "chain_failed" in recorder.names()
        with pytest.raises(ChainFailedError):
            await client.await_chain(started.id, timeout=5, poll_interval=3600)

    async def test_without_observers_the_waiters_are_still_woken(
        self, clock: Clock, notify: MemoryNotifyAdapter, recorder: Recorder
    ) -> None:
        async with Client(MemoryStateAdapter(clock=clock), notify, types, clock=clock) as quiet:
            blocker = await start(quiet, schedule=LATER)
            await fail(quiet, blocker)
            async with quiet.transaction() as tx:
                [started] = await quiet.start_chains(tx, [_start(needs, blockers=[blocker])])
                await listen(notify, recorder, [started.id], [])
            await settle()
        assert started.chain.status is JobStatus.FAILED
        assert recorder.notices == [("finished", started.id)]

    async def test_an_opted_in_type_starts_pending(self, client: Client) -> None:
        blocker = await start(client, schedule=LATER)
        await fail(client, blocker)
        tolerant = await start(client, anyway, 2, blockers=[blocker])
        assert await status(client, tolerant) is JobStatus.PENDING


def _start(job_type: Any, **options: Any) -> Any:
    from jobchain import ChainStart

    return ChainStart(job_type=job_type, input=Item(0), **options)


class TestRetry:
    async def test_retry_at_a_schedule_resets_the_failure_and_keeps_the_history(
        self, client: Client, clock: Clock, notify: MemoryNotifyAdapter, recorder: Recorder
    ) -> None:
        job_id = await start(client, schedule=LATER)
        await fail(client, job_id, "KeyError")
        await listen(notify, recorder, [], [])
        clock.now = START + timedelta(minutes=1)
        async with client.transaction() as tx:
            job = await client.retry_job(tx, job_id, schedule=Schedule.in_seconds(60))
        await settle()
        assert job.status is JobStatus.PENDING
        assert job.scheduled_at == clock.now + timedelta(seconds=60)
        assert job.failed_at is None
        assert job.attempt_base == job.attempt
        assert [e.error_type for e in job.attempt_errors] == ["KeyError"]
        assert recorder.notices == [("scheduled", "work")]
        assert recorder.names()[-1] == "job_retried"

    async def test_a_dependent_of_a_still_failed_blocker_names_the_chain_to_retry(
        self, client: Client
    ) -> None:
        blocker = await start(client, schedule=LATER)
        dependent = await start(client, needs, 2, blockers=[blocker])
        await fail(client, blocker)
        async with client.transaction() as tx:
            with pytest.raises(JobNotRetryableError) as refused:
                await client.retry_jobs(tx, [dependent])
        assert refused.value.blocked_by_chain_id == blocker
        assert f"blocker chain {blocker}" in str(refused.value)
        assert await status(client, dependent) is JobStatus.FAILED
        async with client.transaction() as tx:
            await client.retry_jobs(tx, [blocker])
        assert await status(client, dependent) is JobStatus.BLOCKED

    async def test_a_cancelled_job_whose_blocker_failed_since_is_refused_with_its_own_status(
        self, client: Client
    ) -> None:
        blocker = await start(client, schedule=LATER)
        dependent = await start(client, needs, 2, blockers=[blocker])
        async with client.transaction() as tx:
            await client.cancel_chain(tx, dependent)
        await fail(client, blocker)
        async with client.transaction() as tx:
            with pytest.raises(JobNotRetryableError) as refused:
                await client.retry_job(tx, dependent)
        assert (refused.value.status, refused.value.blocked_by_chain_id) == ("cancelled", blocker)
        assert await status(client, dependent) is JobStatus.CANCELLED

    async def test_retry_chains_pages_and_stops_at_its_limit(self, client: Client) -> None:
        ids = [await start(client, n=i, schedule=LATER) for i in range(7)]
        for job_id in ids:
            await fail(client, job_id)
        seen: list[str] = []
        calls = 0
        while True:
            async with client.transaction() as tx:
                result = await client.retry_chains(tx, limit=3)
            calls += 1
            seen += [j.id for j in result.retried]
            if not result.has_more:
                break
        assert calls == 3
        assert seen == sorted(ids)  # oldest first: one creation time here, so by id
        assert {await status(client, i) for i in ids} == {JobStatus.PENDING}

    async def test_retry_chains_created_range_is_inclusive(self, client: Client, clock: Clock) -> None:
        ids = []
        for minute in range(3):
            clock.now = START + timedelta(minutes=minute)
            ids.append(await start(client, n=minute, schedule=Schedule(at=START + timedelta(hours=2))))
        for job_id in ids:
            await fail(client, job_id)
        async with client.transaction() as tx:
            result = await client.retry_chains(
                tx, created_from=START + timedelta(minutes=1), created_to=START + timedelta(minutes=2)
            )
        assert [j.id for j in result.retried] == ids[1:]


class TestDeadLetters:
    async def test_failed_jobs_only_by_error_type_with_pages(self, client: Client) -> None:
        value_errors = [await start(client, n=i, schedule=LATER) for i in range(3)]
        key_error = await start(client, n=9, schedule=LATER)
        cancelled = await start(client, n=10, schedule=LATER)
        for job_id in value_errors:
            await fail(client, job_id, "ValueError")
        await fail(client, key_error, "KeyError")
        async with client.transaction() as tx:
            await client.cancel_chain(tx, cancelled)
        first = await client.list_dead_letters(error_types=["ValueError"], order="asc", limit=2)
        assert first.next_cursor is not None
        second = await client.list_dead_letters(
            error_types=["ValueError"], order="asc", limit=2, cursor=first.next_cursor
        )
        assert [j.id for j in first.items + second.items] == sorted(value_errors)
        assert second.next_cursor is None
        everything = await client.list_dead_letters(type_names=[work])
        assert {j.id for j in everything.items} == {*value_errors, key_error}


class TestWorkerlessCompletionOfAFinishedChain:
    @pytest.mark.parametrize("how", ["complete", "continue"])
    async def test_is_refused_before_anything_is_written(self, client: Client, how: str) -> None:
        chain_id = await start(client, schedule=LATER)
        async with client.transaction() as tx:
            await client.cancel_chain(tx, chain_id)

        async def handler(completion: Completion[Any, Any]) -> None:
            if how == "complete":
                await completion.complete(1)
            else:
                await completion.continue_with(work, Item(2))

        async with client.transaction() as tx:
            with pytest.raises(JobFinishedError) as refused:
                await client.complete_chain(tx, work, chain_id, handler)
        assert refused.value.status == "cancelled"
        page = await client.list_chain_jobs(chain_id)
        assert [j.status for j in page.items] == [JobStatus.CANCELLED]
