"""The worker's side of the job lifecycle: settings, the failure decision, deadlines,
publishing after a failure, quiet cancellation, retention."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest

from jobchain import (
    DEFAULT_MAX_ATTEMPTS,
    UNSET,
    Client,
    FailJob,
    InvalidArgumentError,
    Job,
    JobStatus,
    JobTimeoutError,
    JobTypes,
    RescheduleJobError,
    Retention,
    Schedule,
)
from jobchain.contracts import Event
from jobchain.memory.state import MemoryStateAdapter
from jobchain.worker import AbortReason, AbortSignal, Attempt, Backoff, Completed, Processors, Worker
from jobchain.worker.abort import AttemptAbortedError
from jobchain.worker.backoff import DEFAULT_BACKOFF, DEFAULT_LEASE
from jobchain.worker.deadline import Deadline
from jobchain.worker.failures import attempt_error_of, fail_reason, over_limit
from jobchain.worker.runner import AttemptSettings
from jobchain.worker.settings import WorkerSettings, resolve_max_attempts

T = TypeVar("T")
BOUND = 10.0
"""Upper bound of every wait; a passing run needs a small fraction of it."""
ZERO = Backoff(initial=timedelta(0), maximum=timedelta(0))
NOW = datetime(2026, 1, 1, tzinfo=UTC)


async def wait_until(probe: Callable[[], Awaitable[T | None]], what: str) -> T:
    try:
        async with asyncio.timeout(BOUND):
            while True:
                value = await probe()
                if value:
                    return value
                await asyncio.sleep(0.01)
    except TimeoutError:
        pytest.fail(f"timed out waiting for {what}")


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)

    def named(self, name: str) -> list[Event]:
        return [e for e in self.events if e.name == name]


def _job(attempt: int, *, base: int = 0, error: str | None = None) -> Job:
    return Job(
        id="00000000-0000-7000-8000-000000000001",
        chain_id="00000000-0000-7000-8000-000000000001",
        type_name="t",
        chain_type_name="t",
        chain_index=0,
        status=JobStatus.RUNNING,
        input=None,
        created_at=NOW,
        scheduled_at=NOW,
        attempt=attempt,
        attempt_base=base,
        last_attempt_error=error,
    )


def _settings(max_attempts: int | None = 3, fail_on: tuple[type[BaseException], ...] = ()) -> AttemptSettings:
    return AttemptSettings(
        retry=DEFAULT_BACKOFF, lease=DEFAULT_LEASE, max_attempts=max_attempts, fail_on=fail_on
    )


# ---------------------------------------------------------------- settings


def test_max_attempts_take_the_first_level_that_sets_one() -> None:
    assert resolve_max_attempts(UNSET, UNSET, UNSET) == DEFAULT_MAX_ATTEMPTS
    assert resolve_max_attempts(UNSET, 4, 9) == 4
    assert resolve_max_attempts(None, 4, 9) is None  # explicit unlimited wins over later levels
    assert resolve_max_attempts(UNSET, UNSET, None) is None


def test_worker_settings_resolve_processor_slice_type_registry_worker() -> None:
    types = JobTypes()
    registry = JobTypes(max_attempts=5, timeout=7)
    own = types.define("own", input=None, output=None, entry=True, max_attempts=2, timeout=3)
    typed = types.define("typed", input=None, output=None, entry=True, max_attempts=None)
    sliced = types.define("sliced", input=None, output=None, entry=True, max_attempts=2)
    inherited = registry.define("inherited", input=None, output=None, entry=True, fail_on=[KeyError])
    bare = types.define("bare", input=None, output=None, entry=True)

    async def handler(attempt: Attempt[None, None]) -> Completed:
        raise AssertionError("not run")

    procs = Processors()
    procs.register(own, handler, max_attempts=1, timeout=timedelta(seconds=1))
    procs.register(typed, handler)
    procs.register(inherited, handler)
    procs.register(bare, handler)
    slice_procs = Processors(max_attempts=9, timeout=0.5)
    slice_procs.register(sliced, handler)
    merged = {p.job_type.name: p for piece in (procs, slice_procs) for p in piece.processors()}
    settings = WorkerSettings(
        merged, retry=None, lease=None, recovery=ZERO, max_attempts=6, timeout=timedelta(seconds=30)
    )
    assert settings.of("own").max_attempts == 1
    assert settings.of("own").timeout == timedelta(seconds=1)
    assert settings.of("typed").max_attempts is None
    assert settings.of("sliced").max_attempts == 9  # the processor slice wins over the type
    assert settings.of("sliced").timeout == timedelta(seconds=0.5)
    assert settings.of("inherited").max_attempts == 5
    assert settings.of("inherited").timeout == timedelta(seconds=7)
    assert settings.of("inherited").fail_on == (KeyError,)
    assert settings.of("bare").max_attempts == 6
    assert settings.of("bare").timeout == timedelta(seconds=30)
    default = WorkerSettings({"bare": merged["bare"]}, retry=None, lease=None, recovery=ZERO)
    assert default.of("bare").max_attempts == DEFAULT_MAX_ATTEMPTS
    assert default.of("bare").timeout is None


@pytest.mark.parametrize(
    "options",
    [
        {"max_attempts": 0},
        {"max_attempts": 1.5},
        {"max_attempts": True},
        {"timeout": 0},
        {"timeout": -1},
        {"timeout": math.nan},
        {"timeout": math.inf},
        {"timeout": "10s"},
        {"retention": {"completed": timedelta(days=1)}},
    ],
)
def test_bad_worker_lifecycle_settings_are_refused(options: dict[str, Any]) -> None:
    types = JobTypes()
    job_type = types.define("w", input=None, output=None, entry=True)
    procs = Processors()

    async def handler(attempt: Attempt[None, None]) -> Completed:
        raise AssertionError("not run")

    procs.register(job_type, handler)
    client = Client(MemoryStateAdapter(), None, types)
    with pytest.raises(InvalidArgumentError):
        Worker(client, procs, **options)


def test_bad_processor_limits_are_refused() -> None:
    types = JobTypes()
    job_type = types.define("p", input=None, output=None, entry=True)

    async def handler(attempt: Attempt[None, None]) -> Completed:
        raise AssertionError("not run")

    with pytest.raises(InvalidArgumentError, match="max_attempts"):
        Processors(max_attempts=0)
    with pytest.raises(InvalidArgumentError, match="timeout"):
        Processors(timeout=-2)
    procs = Processors()
    with pytest.raises(InvalidArgumentError, match="p: max_attempts"):
        procs.register(job_type, handler, max_attempts=-1)
    with pytest.raises(InvalidArgumentError, match="p: timeout"):
        procs.register(job_type, handler, timeout=math.nan)
    assert list(procs.processors()) == []  # nothing registered by a refused call


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"completed": timedelta(0)},
        {"failed": -5},
        {"cancelled": "a month"},
        {"completed": timedelta(days=1), "interval": timedelta(0)},
        {"completed": timedelta(days=1), "batch_size": 0},
        {"completed": timedelta(days=1), "max_batches": 1.0},
    ],
)
def test_bad_retention_is_refused(options: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        Retention(**options)


def test_retention_cutoffs_per_status() -> None:
    retention = Retention(completed=timedelta(days=7), cancelled=timedelta(seconds=30), batch_size=10)
    request = retention.cutoffs(NOW)
    assert request.completed_before == NOW - timedelta(days=7)
    assert request.failed_before is None
    assert request.cancelled_before == NOW - timedelta(seconds=30)
    assert request.limit == 10


# ---------------------------------------------------------------- the failure decision


def test_fail_reason_retries_until_the_last_attempt() -> None:
    settings = _settings(max_attempts=3)
    assert fail_reason(_job(1), settings, ValueError("x")) is None
    assert fail_reason(_job(2), settings, ValueError("x")) is None
    assert fail_reason(_job(3), settings, ValueError("x")) == "attempts_exhausted"
    assert fail_reason(_job(5, base=3), settings, ValueError("x")) is None  # retried: fresh budget
    assert fail_reason(_job(3), settings, RescheduleJobError(Schedule(after=timedelta(0)))) == (
        "attempts_exhausted"
    )
    assert fail_reason(_job(99), _settings(max_attempts=None), ValueError("x")) is None


def test_fail_reason_fails_at_once_for_fail_job_and_fail_on() -> None:
    settings = _settings(max_attempts=None, fail_on=(KeyError,))
    assert fail_reason(_job(1), settings, FailJob("no")) == "fail_job"
    assert fail_reason(_job(1), settings, KeyError("k")) == "fail_on"
    assert fail_reason(_job(1), settings, LookupError("base class")) is None
    # A release at shutdown is not a failure, even on the last attempt.
    assert fail_reason(_job(3), _settings(), AttemptAbortedError(AbortReason.SHUTDOWN)) is None


def test_over_limit_spares_a_released_job() -> None:
    settings = _settings(max_attempts=2)
    assert not over_limit(_job(2), settings)
    assert over_limit(_job(3, error="lease of worker w expired"), settings)
    # A release at shutdown gave its attempt back (attempt_base + 1): the third claim is the
    # second attempt of the budget.
    assert not over_limit(_job(3, base=1), settings)
    assert not over_limit(_job(50), _settings(max_attempts=None))


def test_attempt_errors_carry_type_message_and_traceback() -> None:
    try:
        raise ValueError("disk full")
    except ValueError as caught:
        error = caught
    entry = attempt_error_of(_job(4), "w-1", error, NOW)
    assert (entry.attempt, entry.worker_id, entry.error_type, entry.message) == (
        4,
        "w-1",
        "ValueError",
        "disk full",
    )
    assert entry.traceback is not None
    assert "raise ValueError" in entry.traceback
    assert entry.at == NOW
    rescheduled = attempt_error_of(_job(1), None, RescheduleJobError(None, "later"), NOW)
    assert (rescheduled.error_type, rescheduled.message) == ("RescheduleJobError", "later")


# ---------------------------------------------------------------- deadlines


async def test_a_deadline_fires_the_signal_then_cancels() -> None:
    signal = AbortSignal()
    deadline = Deadline("j", timedelta(seconds=0.01), signal)
    cancelled = asyncio.Event()

    async def stuck() -> None:
        try:
            await asyncio.sleep(BOUND)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(JobTimeoutError):
        await deadline.run(deadline.timed(stuck()), lambda: True)
    assert signal.reason is AbortReason.TIMEOUT
    assert (deadline.fired, deadline.failed) == (True, True)
    assert cancelled.is_set()


async def test_work_finished_in_time_is_untouched() -> None:
    signal = AbortSignal()
    deadline = Deadline("j", timedelta(seconds=BOUND), signal)

    async def quick() -> None:
        return None

    await deadline.run(deadline.timed(quick()), lambda: True)
    assert not signal.aborted
    assert (deadline.fired, deadline.failed) == (False, False)


async def test_cancelling_the_attempt_is_not_a_timeout() -> None:
    deadline = Deadline("j", timedelta(seconds=BOUND), AbortSignal())
    started = asyncio.Event()

    async def waits() -> None:
        started.set()
        await asyncio.sleep(BOUND)

    task = asyncio.ensure_future(deadline.run(deadline.timed(waits()), lambda: True))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_an_unfinished_return_after_the_deadline_is_a_timeout() -> None:
    signal = AbortSignal()
    deadline = Deadline("j", timedelta(seconds=0.01), signal)

    async def returns_on_signal() -> None:
        await signal.wait()  # stops as asked, within the grace, but never completed

    with pytest.raises(JobTimeoutError):
        await deadline.run(deadline.timed(returns_on_signal()), lambda: True)
    finished = Deadline("k", timedelta(seconds=0.01), AbortSignal())

    async def completed_then_waited() -> None:
        await asyncio.sleep(0.05)

    await finished.run(finished.timed(completed_then_waited()), lambda: False)  # committed before: kept
    assert (finished.fired, finished.failed) == (True, False)
