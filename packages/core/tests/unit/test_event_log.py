"""The worker's event log: a failure storm stays readable (burst, then one summary per window)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from jobchain.worker.event_log import EventLog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _failed(type_name: str, n: int) -> dict[str, object]:
    return {"job.id": f"id-{n}", "job.type": type_name, "error": "ValueError: boom"}


@pytest.fixture
def logger(caplog: pytest.LogCaptureFixture) -> logging.Logger:
    caplog.set_level(logging.WARNING, logger="test.event_log")
    return logging.getLogger("test.event_log")


def test_a_storm_writes_the_burst_then_one_summary_per_window(
    logger: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    events = EventLog(logger, burst=5, window=10.0, clock=clock)
    for n in range(1000):
        events.log("job_attempt_failed", _failed("a" if n % 4 else "b", n))
    assert len(caplog.records) == 5
    clock.now += 10.0
    events.log("job_attempt_failed", _failed("a", 1000))
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 7
    summary = messages[5]
    assert "995 more lines held back" in summary
    # The burst took ids 0-4 (b, a, a, a, b): 747 of type a and 248 of type b were held back.
    assert "a=747" in summary
    assert "b=248" in summary
    assert "DEBUG" in summary
    assert messages[6].startswith("job_attempt_failed job.id=id-1000")


def test_held_back_lines_are_written_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="test.event_log.debug")
    events = EventLog(logging.getLogger("test.event_log.debug"), burst=2, window=10.0, clock=Clock())
    for n in range(10):
        events.log("job_attempt_failed", _failed("a", n))
    levels = [record.levelno for record in caplog.records]
    assert levels == [logging.WARNING] * 2 + [logging.DEBUG] * 8


def test_each_event_name_has_its_own_budget(logger: logging.Logger, caplog: pytest.LogCaptureFixture) -> None:
    events = EventLog(logger, burst=3, window=10.0, clock=Clock())
    for n in range(10):
        events.log("job_attempt_failed", _failed("a", n))
        events.log("worker_error", {"error": "down"})
    assert len(caplog.records) == 6


def test_close_writes_pending_summaries_and_quiet_windows_write_none(
    logger: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    events = EventLog(logger, burst=3, window=10.0, clock=Clock())
    events.log("worker_error", {"error": "down"})
    events.close()
    assert len(caplog.records) == 1  # under budget: nothing to summarize
    for n in range(5):
        events.log("job_attempt_failed", _failed("a", n))
    events.close()
    assert "2 more lines held back" in caplog.records[-1].getMessage()


def test_debug_events_are_not_limited(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="test.event_log.plain")
    events = EventLog(logging.getLogger("test.event_log.plain"), burst=1, window=10.0, clock=Clock())
    for n in range(50):
        events.log("job_attempt_completed", {"job.id": n})
    assert len(caplog.records) == 50


async def test_a_storm_that_stops_still_gets_its_summary(
    logger: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    events = EventLog(logger, burst=1, window=0.01, clock=clock)
    events.log("job_attempt_failed", _failed("a", 1))
    events.log("job_attempt_failed", _failed("a", 2))
    clock.now += 1.0
    # The summary timer fires on the event loop; wait for it by polling the records.
    for _ in range(500):
        if len(caplog.records) == 2:
            break
        await asyncio.sleep(0.01)
    assert "1 more lines held back" in caplog.records[-1].getMessage()
