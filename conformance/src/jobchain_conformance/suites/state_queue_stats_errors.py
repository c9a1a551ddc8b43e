"""queue_stats: failed jobs by the type of their last recorded error (see ``state_queue_stats``)."""

from __future__ import annotations

from datetime import datetime, timedelta

from jobchain.contracts import StateAdapter
from jobchain.stats import ERROR_TYPES_KEPT
from jobchain_conformance.helpers import (
    WORKER,
    acquire_job,
    attempt_error,
    cancel,
    fail,
    queue_stats,
    retry,
    run_and_complete,
    start,
)
from jobchain_conformance.suites.state_lifecycle_fail import rescheduled_with
from jobchain_conformance.suites.state_queue_stats_support import (
    failed_with,
    running,
    type_stats,
)

SECOND = timedelta(seconds=1)


class QueueStatsErrorTypeTests:
    """Failed jobs by the type of their last recorded error: the ten most frequent."""

    async def test_failed_jobs_count_by_the_type_of_their_last_error(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await running(state_adapter, now, type_name="a")
        await rescheduled_with(state_adapter, job, attempt_error(1, at=now, error_type="ValueError"), now=now)
        again = await acquire_job(state_adapter, job, now=now + SECOND)
        last = attempt_error(2, at=now + SECOND, error_type="TimeoutError", worker_id=WORKER)
        await fail(
            state_adapter,
            job.id,
            now=now + SECOND,
            worker_id=WORKER,
            lease_generation=again.lease_generation,
            attempt_error=last,
        )
        kept = await start(state_adapter, now=now, type_name="a")  # fails keeping its history
        await rescheduled_with(
            state_adapter,
            await acquire_job(state_adapter, kept, now=now + SECOND),
            attempt_error(1, at=now, error_type="KeyError"),
            now=now + SECOND,
        )
        await fail(state_adapter, kept.id, now=now + 2 * SECOND)
        stats = type_stats(await queue_stats(state_adapter, now=now + 3 * SECOND), "a")
        assert stats.failed == 2
        assert dict(stats.failed_by_error_type) == {"KeyError": 1, "TimeoutError": 1}

    async def test_a_failed_job_without_history_counts_under_the_empty_type(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await failed_with(state_adapter, now, type_name="a", error_type=None)
        await failed_with(state_adapter, now, type_name="a", error_type="ValueError")
        await failed_with(state_adapter, now, type_name="a", error_type=None)
        stats = type_stats(await queue_stats(state_adapter, now=now), "a")
        assert list(stats.failed_by_error_type.items()) == [("", 2), ("ValueError", 1)]

    async def test_only_failed_jobs_are_counted(self, state_adapter: StateAdapter, now: datetime) -> None:
        pending = await running(state_adapter, now, type_name="a")
        await rescheduled_with(
            state_adapter, pending, attempt_error(1, at=now, error_type="ValueError"), now=now
        )
        done = await running(state_adapter, now, type_name="b")
        await rescheduled_with(
            state_adapter, done, attempt_error(1, at=now, error_type="ValueError"), now=now
        )
        await run_and_complete(state_adapter, done, now=now + SECOND)
        retried = await failed_with(state_adapter, now, type_name="c", error_type="ValueError")
        await retry(state_adapter, [retried.id], now=now + SECOND)
        await cancel(state_adapter, [(await start(state_adapter, now=now, type_name="c")).id], now=now)
        stats = await queue_stats(state_adapter, now=now + 2 * SECOND)
        for type_name in ["a", "b", "c"]:
            figures = type_stats(stats, type_name)
            assert (figures.failed, dict(figures.failed_by_error_type)) == (0, {}), type_name

    async def test_a_job_failed_by_its_blocker_counts_under_that_entrys_type(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        await start(state_adapter, now=now, type_name="a", blocker_chain_ids=[blocker.id])
        await fail(state_adapter, blocker.id, now=now)
        stats = await queue_stats(state_adapter, now=now)
        assert dict(type_stats(stats, "a").failed_by_error_type) == {"BlockerChainFailed": 1}
        assert dict(type_stats(stats, "blocker").failed_by_error_type) == {"": 1}

    async def test_the_most_frequent_types_are_kept_ties_by_name(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        singles = [f"E{number:02}" for number in range(3, 14)]  # E03..E13: 11 types seen once
        for error_type in ["E01", "E01", "E01", "E02", "E02", *reversed(singles)]:
            await failed_with(state_adapter, now, type_name="a", error_type=error_type)
        stats = type_stats(await queue_stats(state_adapter, now=now), "a")
        assert stats.failed == 16
        expected = [("E01", 3), ("E02", 2), *((name, 1) for name in singles[: ERROR_TYPES_KEPT - 2])]
        assert list(stats.failed_by_error_type.items()) == expected
