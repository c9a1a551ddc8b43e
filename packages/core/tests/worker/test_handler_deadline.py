"""A handler's deadline measures the handler (issue 36, deliver 1).

A shop's ``jobchain_jobs_timed_out_total`` said 172 where 19 handlers really timed out, and
``jobchain_attempts_lost_total{reason="already_completed"}`` said 48 though every job was
claimed once and completed by the worker that claimed it: the deadline (``timeout``) also
ran while jobchain committed the completion, so 3 ms handlers "timed out" while an
overloaded database committed. The clock starts when the handler is called and stops when it
returns; claiming, preparing and committing are not part of it. ``job_timed_out`` (metric
``jobchain.jobs.timed_out``) counts the attempts the deadline failed, ``job_attempt_<reason>``
(``jobchain.attempts.lost``) those that lost their job to another attempt or a cancel.

The slow commit is a state proxy whose completion transaction waits at a gate the test
opens; the worker's monotonic clock (which the deadline reads) is injected and moved by the
test. Nothing decides an outcome by the wall clock: the one real sleep, :func:`past_real_deadline`,
is an ordering barrier (see there).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Literal, TypeVar

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jobchain import Client, JobStatus, JobTypes
from jobchain.contracts import JobComplete
from jobchain.contracts.observe import Event
from jobchain.errors import JobTimeoutError, TransientStateError
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.telemetry.prometheus import PrometheusMetrics
from jobchain.worker import AbortReason, Attempt, Backoff, Completed, Processors, Worker
from jobchain.worker.abort import AbortSignal
from jobchain.worker.backoff import LeaseConfig
from jobchain.worker.deadline import Deadline

T = TypeVar("T")
BOUND = 30.0
"""Seconds a step may take on a starved machine before the test gives up (never a timing)."""
TIMEOUT = 0.05
"""The handlers' deadline, on the worker's (injected) clock."""
HANDLER_RUNS = 0.003
"""How long the quick handler runs, on the worker's clock: 3 ms."""
COMMIT_TAKES = 20 * TIMEOUT
"""How long the slow commit takes, on the worker's clock: far past the deadline."""
ZERO = Backoff(initial=timedelta(0), maximum=timedelta(0))
LEASE = LeaseConfig(duration=timedelta(seconds=60), renew_every=timedelta(seconds=30))

Lands = Literal["before", "after"]
ENDINGS = {"job_attempt_completed", "job_attempt_failed"} | {
    "job_attempt_" + reason.value for reason in AbortReason
}
"""The events with which an attempt ends."""


class SlowCommit(MemoryStateAdapter):
    """The first transaction that completes a job waits at :attr:`gate` when it ends.

    ``lands="after"``: the completion is committed, then its acknowledgement is held up (the
    database did the work; the reply is slow). ``lands="before"``: the commit itself waits.
    """

    def __init__(self, lands: Lands) -> None:
        super().__init__()
        self.lands = lands
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()
        self._used = False

    def transaction(self, *, read_only: bool = False, connection: object | None = None) -> Any:
        opened = super().transaction(read_only=read_only, connection=connection)
        owner = self

        class Wrapped:
            completes = False

            async def __aenter__(self) -> Any:
                tx: Any = await opened.__aenter__()
                complete = tx.job_complete
                wrapped = self

                async def job_complete(params: JobComplete) -> Any:
                    wrapped.completes = True
                    return await complete(params)

                tx.job_complete = job_complete
                return tx

            async def __aexit__(self, *exc: Any) -> Any:
                slow = self.completes and exc[0] is None and not owner._used
                if slow:
                    owner._used = True
                if slow and owner.lands == "before":
                    owner.entered.set()
                    await owner.gate.wait()
                result = await opened.__aexit__(*exc)
                if slow and owner.lands == "after":
                    owner.entered.set()
                    await owner.gate.wait()
                return result

        return Wrapped()


class LostReply(MemoryStateAdapter):
    """The first transaction that completes a job commits, then reports a lost connection:
    the completion landed, but its writer cannot know (an ambiguous commit)."""

    def __init__(self) -> None:
        super().__init__()
        self.used = False

    def transaction(self, *, read_only: bool = False, connection: object | None = None) -> Any:
        opened = super().transaction(read_only=read_only, connection=connection)
        owner = self

        class Wrapped:
            completes = False

            async def __aenter__(self) -> Any:
                tx: Any = await opened.__aenter__()
                complete = tx.job_complete
                wrapped = self

                async def job_complete(params: JobComplete) -> Any:
                    wrapped.completes = True
                    return await complete(params)

                tx.job_complete = job_complete
                return tx

            async def __aexit__(self, *exc: Any) -> Any:
                result = await opened.__aexit__(*exc)
                if self.completes and exc[0] is None and not owner.used:
                    owner.used = True
                    raise TransientStateError("connection lost before the commit's reply")
                return result

        return Wrapped()


class Monotonic:
    """The worker's monotonic clock: moves only when the test moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Events:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)

    def names(self) -> list[str]:
        return [e.name for e in self.events]

    def all_ended(self) -> bool:
        """Every attempt started has reported its end (completed, failed or lost)."""
        names = self.names()
        ended = [n for n in names if n in ENDINGS]
        return len(ended) == names.count("job_attempt_started")


def scraped(metrics: PrometheusMetrics, sample: str) -> dict[tuple[tuple[str, str], ...], float]:
    """labels -> value of every sample named ``sample`` in a scrape."""
    found: dict[tuple[tuple[str, str], ...], float] = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for point in family.samples:
            if point.name == sample:
                found[tuple(sorted(point.labels.items()))] = point.value
    return found


def total(metrics: PrometheusMetrics, sample: str) -> float:
    return sum(scraped(metrics, sample).values())


def counts(metrics: PrometheusMetrics) -> dict[str, object]:
    """What an operator's dashboard shows: timeouts, lost attempts by reason, retries, completions."""
    lost = {
        dict(labels)["reason"]: value
        for labels, value in scraped(metrics, "jobchain_attempts_lost_total").items()
    }
    return {
        "timed_out": total(metrics, "jobchain_jobs_timed_out_total"),
        "lost": lost,
        "retried": total(metrics, "jobchain_jobs_retried_total"),
        "completed": total(metrics, "jobchain_jobs_completed_total"),
    }


async def wait_until(probe: Callable[[], Awaitable[T | None]], what: str) -> T:
    try:
        async with asyncio.timeout(BOUND):
            while True:
                value = await probe()
                if value:
                    return value
                await asyncio.sleep(0.01)  # polls the store; the bound is not a timing
    except TimeoutError:
        pytest.fail(f"timed out waiting for {what}")


async def past_real_deadline() -> None:
    """Let the event loop run past the moment a deadline armed earlier on the *loop's* clock,
    and its grace (``min(1 s, timeout)``), would be due. Not a timing: loop timers fire in
    order of their due time, so a deadline armed before the handler ran (as jobchain's was
    before issue 36) has fired, and cancelled the handler, by the time this returns, however
    slow the machine. The deadline itself reads the injected clock, so the length of this
    sleep decides nothing."""
    await asyncio.sleep(2 * TIMEOUT)


Style = Literal["staged", "sync", "atomic", "prepared"]


def quick_processors(job_type: Any, style: Style, clock: Monotonic) -> Processors:
    """A 3 ms handler in one of the ways a handler completes its job."""
    processors = Processors()
    if style == "sync":

        @processors.handler(job_type)
        def handle_sync(attempt: Attempt[int, int]) -> int:
            clock.now += HANDLER_RUNS
            return attempt.input

        return processors

    @processors.handler(job_type)
    async def handle(attempt: Attempt[int, int]) -> Completed:
        if style == "staged":
            await asyncio.sleep(0)  # its first await is its own work: staged mode
        elif style == "prepared":
            await attempt.prepare("staged")
        clock.now += HANDLER_RUNS
        return await attempt.complete(attempt.input)

    return processors


@pytest.mark.parametrize("lands", ["before", "after"])
@pytest.mark.parametrize("group_commit", [True, False], ids=["group", "own_tx"])
@pytest.mark.parametrize("style", ["staged", "sync", "atomic", "prepared"])
async def test_a_quick_handler_whose_commit_outlasts_its_timeout_neither_times_out_nor_is_lost(
    style: Style, group_commit: bool, lands: Lands
) -> None:
    types = JobTypes()
    quick = types.define("quick", input=int, output=int, entry=True, timeout=TIMEOUT, max_attempts=3)
    state = SlowCommit(lands)
    metrics = PrometheusMetrics()
    events = Events()
    client = Client(state, MemoryNotifyAdapter(), types, observers=[metrics, events])
    clock = Monotonic()
    async with client.transaction() as tx:
        started = (await client.start_chain(tx, quick, 7)).chain
    worker = Worker(
        client,
        quick_processors(quick, style, clock),
        retry=ZERO,
        lease=LEASE,
        poll_interval=0.05,
        heartbeat_interval=3600.0,
        group_commit=group_commit,
    )
    worker.monotonic = clock
    await worker.start()
    try:
        async with asyncio.timeout(BOUND):
            await state.entered.wait()
        clock.now += COMMIT_TAKES  # the overloaded database takes its time to commit
        await past_real_deadline()
        state.gate.set()

        async def settled() -> bool:
            job = await client.get_job(started.id)
            return job is not None and job.status is JobStatus.COMPLETED and events.all_ended()

        await wait_until(settled, "the job to complete and every attempt to end")
    finally:
        await worker.stop()
    job = await client.get_job(started.id)
    assert job is not None
    assert counts(metrics) == {"timed_out": 0, "lost": {}, "retried": 0, "completed": 1}
    assert (job.status, job.attempt, job.attempt_errors) == (JobStatus.COMPLETED, 1, ())
    assert [n for n in events.names() if n == "job_timed_out" or n.startswith("job_attempt_")] == [
        "job_attempt_started",
        "job_attempt_completed",
    ]


@pytest.mark.parametrize("style", ["staged", "sync"])
async def test_a_handler_that_overruns_its_deadline_times_out_once(style: Style) -> None:
    types = JobTypes()
    slow = types.define("slow", input=int, output=int, entry=True, timeout=TIMEOUT, max_attempts=1)
    state = SlowCommit("after")
    metrics = PrometheusMetrics()
    events = Events()
    client = Client(state, MemoryNotifyAdapter(), types, observers=[metrics, events])
    clock = Monotonic()
    running = asyncio.Event()
    loop = asyncio.get_running_loop()
    processors = Processors()
    if style == "sync":

        @processors.handler(slow)
        def handle_sync(attempt: Attempt[int, int]) -> int:
            loop.call_soon_threadsafe(running.set)
            while not attempt.signal.aborted:  # a sync handler polls its signal
                time.sleep(0.001)
            attempt.signal.raise_if_aborted()
            return attempt.input

    else:

        @processors.handler(slow)
        async def handle(attempt: Attempt[int, int]) -> Completed:
            await attempt.prepare("staged")
            running.set()
            await attempt.signal.wait()  # its own long work, stopped by the signal
            attempt.signal.raise_if_aborted()
            return await attempt.complete(attempt.input)

    async with client.transaction() as tx:
        started = (await client.start_chain(tx, slow, 7)).chain
    worker = Worker(
        client, processors, retry=ZERO, lease=LEASE, poll_interval=0.05, heartbeat_interval=3600.0
    )
    worker.monotonic = clock
    await worker.start()
    try:
        async with asyncio.timeout(BOUND):
            await running.wait()
        clock.now += 2 * TIMEOUT  # the handler runs past its deadline

        async def failed() -> bool:
            job = await client.get_job(started.id)
            return job is not None and job.status is JobStatus.FAILED

        await wait_until(failed, "the timed-out job to fail")
    finally:
        await worker.stop()
    job = await client.get_job(started.id)
    assert job is not None
    assert [e.error_type for e in job.attempt_errors] == ["JobTimeoutError"]
    assert total(metrics, "jobchain_jobs_timed_out_total") == 1
    assert scraped(metrics, "jobchain_attempts_lost_total") == {}
    assert scraped(metrics, "jobchain_jobs_failed_total") == {
        (("error_type", "JobTimeoutError"), ("job_type", "slow")): 1.0
    }
    [timed_out] = [e for e in events.events if e.name == "job_timed_out"]
    assert timed_out.attributes["timeout"] == TIMEOUT
    assert not state.entered.is_set()  # nothing was completed


@pytest.mark.parametrize("group_commit", [True, False], ids=["group", "own_tx"])
@pytest.mark.parametrize("style", ["staged", "sync", "atomic"])
async def test_a_completion_whose_commit_reply_was_lost_counts_as_completed_not_lost(
    style: Style, group_commit: bool
) -> None:
    """The attempt's own completion landed though its writer saw an error: when jobchain then
    finds the job already completed, it is this attempt's completion, not a loss."""
    types = JobTypes()
    quick = types.define("quick", input=int, output=int, entry=True, max_attempts=3)
    state = LostReply()
    metrics = PrometheusMetrics()
    events = Events()
    client = Client(state, MemoryNotifyAdapter(), types, observers=[metrics, events])
    clock = Monotonic()
    async with client.transaction() as tx:
        started = (await client.start_chain(tx, quick, 7)).chain
    worker = Worker(
        client,
        quick_processors(quick, style, clock),
        retry=ZERO,
        lease=LEASE,
        poll_interval=0.05,
        heartbeat_interval=3600.0,
        group_commit=group_commit,
    )
    await worker.start()
    try:

        async def settled() -> bool:
            job = await client.get_job(started.id)
            return job is not None and job.status is JobStatus.COMPLETED and events.all_ended()

        await wait_until(settled, "the job to complete and every attempt to end")
    finally:
        await worker.stop()
    job = await client.get_job(started.id)
    assert job is not None
    assert state.used
    assert counts(metrics) == {"timed_out": 0, "lost": {}, "retried": 0, "completed": 1}
    assert (job.status, job.attempt, job.completed_by) == (JobStatus.COMPLETED, 1, worker.worker_id)


# ---------------------------------------------------------------- the deadline's clock itself


def manual_deadline(clock: Monotonic) -> tuple[Deadline, AbortSignal]:
    signal = AbortSignal()
    return Deadline("j", timedelta(seconds=TIMEOUT), signal, clock=clock), signal


async def test_the_clock_starts_when_the_handler_is_called() -> None:
    clock = Monotonic()
    deadline, signal = manual_deadline(clock)
    claimed = asyncio.Event()
    go = asyncio.Event()

    async def handler() -> None:
        clock.now += HANDLER_RUNS

    async def attempt() -> None:
        claimed.set()
        await go.wait()  # claiming and preparing: before the handler is called
        await deadline.timed(handler())

    running = asyncio.ensure_future(deadline.run(attempt(), lambda: True))
    await claimed.wait()
    clock.now += COMMIT_TAKES
    go.set()
    await running
    assert (deadline.fired, signal.aborted) == (False, False)
    assert deadline.elapsed == pytest.approx(HANDLER_RUNS)


async def test_excluded_work_does_not_count_and_handler_time_adds_up_across_it() -> None:
    clock = Monotonic()
    deadline, signal = manual_deadline(clock)
    committing = asyncio.Event()
    committed = asyncio.Event()
    stopped: list[AbortReason] = []

    async def handler() -> None:
        clock.now += 0.6 * TIMEOUT
        with deadline:  # jobchain's own write, which the handler waits for
            committing.set()
            await committed.wait()
        assert not signal.aborted  # 0.6 of the deadline used, however long the write took
        clock.now += 0.6 * TIMEOUT  # past it now: 1.2 of the deadline, in two stretches
        stopped.append(await signal.wait())

    running = asyncio.ensure_future(deadline.run(deadline.timed(handler()), lambda: True))
    await committing.wait()
    clock.now += COMMIT_TAKES
    committed.set()
    with pytest.raises(JobTimeoutError):
        await running
    assert stopped == [AbortReason.TIMEOUT]
    assert deadline.failed
    assert deadline.elapsed == pytest.approx(1.2 * TIMEOUT)


async def test_a_handler_already_past_its_deadline_learns_it_as_its_excluded_work_ends() -> None:
    clock = Monotonic()
    deadline, signal = manual_deadline(clock)
    seen: list[bool] = []

    async def handler() -> None:
        clock.now += 2 * TIMEOUT  # past the deadline, before the deadline's next look
        with deadline:
            pass
        seen.append(signal.aborted)  # fired on the spot, not at the next check
        signal.raise_if_aborted()

    with pytest.raises(JobTimeoutError):
        await deadline.run(deadline.timed(handler()), lambda: True)
    assert seen == [True]
