"""queue_stats (counts, due jobs, expired leases, failures by error type) and jobs_list(leased_by=).

Every figure is read at an explicit ``now``. Where the contract leaves a choice open, the
suite pins the in-process reference's:

- *due* is pending with ``scheduled_at <= now`` (a job scheduled exactly now is due);
  an *expired lease* is ``leased_until < now`` (a lease ending exactly now has not expired,
  as the reaper decides);
- ``failed_by_error_type`` counts failed jobs by the ``error_type`` of the LAST entry of their
  error history (``""`` for an empty history). It keeps the ``ERROR_TYPES_KEPT`` (10) most
  frequent types; among equal counts the error type that sorts first in code point order
  wins. The mapping lists them in that order: most frequent first, ties by error type;
- ``types`` are sorted by type name in code point order (Python's ``sorted``: ``"Zeta"``
  before ``"alpha"``, whatever the database collation); a type named twice in ``type_names``
  is listed once; a named type with no jobs reads as zeros with one zero
  :class:`WindowCounts` per requested window and no durations;
- ``jobs_list(leased_by=...)`` lists only ``running`` jobs held by those workers (a lease
  that expired still counts: the job is running until reaped).

The time-based figures (windows, durations, throughput) are in ``state_queue_stats_time``;
:class:`QueueStatsTests` gathers both modules and is what ``all.py`` lists.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobchain.contracts import ChainsDelete, JobsCreate, QueueStatsGet, StateAdapter
from jobchain.entities import JobStatus, Schedule
from jobchain.errors import InvalidArgumentError
from jobchain.stats import WindowCounts
from jobchain_conformance.helpers import (
    assert_time,
    cancel,
    continue_chain,
    in_transaction,
    new_job,
    queue_stats,
    reap,
    run_and_complete,
    start,
)
from jobchain_conformance.suites._base import StateSuiteBase
from jobchain_conformance.suites.state_isolation import open_writer, read
from jobchain_conformance.suites.state_queue_stats_errors import QueueStatsErrorTypeTests
from jobchain_conformance.suites.state_queue_stats_leased import JobsListLeasedByTests
from jobchain_conformance.suites.state_queue_stats_support import (
    counts,
    failed_with,
    names,
    running,
    start_completed_of,
    type_stats,
    zeros,
)
from jobchain_conformance.suites.state_queue_stats_time import (
    QueueStatsDurationTests,
    QueueStatsThroughputTests,
    QueueStatsWindowTests,
)

SECOND = timedelta(seconds=1)
HOUR = timedelta(hours=1)


class QueueStatsCountTests:
    """Counts by status, due and scheduled jobs, the oldest due job, expired leases, listing."""

    async def test_an_empty_store_lists_no_types(self, state_adapter: StateAdapter, now: datetime) -> None:
        stats = await queue_stats(state_adapter, now=now)
        assert (stats.types, stats.throughput) == ((), ())
        assert_time(state_adapter, stats.now, now)
        assert (stats.due, stats.oldest_due_age, stats.total(JobStatus.PENDING)) == (0, None, 0)

    async def test_every_status_is_counted_per_type(self, state_adapter: StateAdapter, now: datetime) -> None:
        await running(state_adapter, now, type_name="a")
        await run_and_complete(state_adapter, await start(state_adapter, now=now, type_name="a"), now=now)
        await failed_with(state_adapter, now, type_name="a", error_type="ValueError")
        await cancel(state_adapter, [(await start(state_adapter, now=now, type_name="a")).id], now=now)
        await start(state_adapter, now=now, type_name="a")  # due
        await start(state_adapter, now=now, type_name="a", schedule=Schedule(at=now + HOUR))
        blocker = await start(state_adapter, now=now, type_name="b")
        await start(state_adapter, now=now, type_name="a", blocker_chain_ids=[blocker.id])

        stats = await queue_stats(state_adapter, now=now + SECOND)
        assert names(stats) == ["a", "b"]
        a, b = stats.types
        expected = zeros(
            blocked=1, pending=2, due=1, scheduled=1, running=1, completed=1, failed=1, cancelled=1
        )
        assert counts(a) == expected
        assert counts(b) == zeros(pending=1, due=1)
        assert (a.total, b.total, stats.total(JobStatus.PENDING), stats.due) == (7, 1, 3, 2)
        assert [a.count(status) for status in JobStatus] == [1, 2, 1, 1, 1, 1]

    async def test_a_job_scheduled_exactly_now_is_due_and_a_later_one_scheduled(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        at = now + 10 * SECOND
        await start(state_adapter, now=now, type_name="a", schedule=Schedule(at=at))
        before = type_stats(await queue_stats(state_adapter, now=at - SECOND), "a")
        assert (before.pending, before.due, before.scheduled, before.oldest_due_at) == (1, 0, 1, None)
        exactly = type_stats(await queue_stats(state_adapter, now=at), "a")
        assert (exactly.pending, exactly.due, exactly.scheduled) == (1, 1, 0)
        assert_time(state_adapter, exactly.oldest_due_at, at)

    async def test_oldest_due_at_is_the_longest_waiting_due_job_of_each_type(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await running(state_adapter, now - HOUR, type_name="a")  # waited longest, but is claimed
        await start(state_adapter, now=now + 5 * SECOND, type_name="a")
        await start(state_adapter, now=now, type_name="a", schedule=Schedule(at=now + 2 * SECOND))
        await start(state_adapter, now=now, type_name="a", schedule=Schedule(at=now + HOUR))
        await start(state_adapter, now=now, type_name="b", schedule=Schedule(at=now + 7 * SECOND))
        stats = await queue_stats(state_adapter, now=now + 10 * SECOND)
        a, b = type_stats(stats, "a"), type_stats(stats, "b")
        assert (a.due, a.scheduled, b.due) == (2, 1, 1)
        assert_time(state_adapter, a.oldest_due_at, now + 2 * SECOND)
        assert_time(state_adapter, b.oldest_due_at, now + 7 * SECOND)
        assert stats.oldest_due_age is not None
        assert abs(stats.oldest_due_age - 8 * SECOND) <= state_adapter.time_precision

    async def test_an_expired_lease_is_a_running_job_past_its_leased_until(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await running(state_adapter, now, type_name="a", lease=30 * SECOND)
        await running(state_adapter, now, type_name="b", lease=60 * SECOND)
        at_expiry = await queue_stats(state_adapter, now=now + 30 * SECOND)
        assert counts(type_stats(at_expiry, "a")) == zeros(running=1)  # leased_until == now: not yet
        after = await queue_stats(state_adapter, now=now + 31 * SECOND)
        assert counts(type_stats(after, "a")) == zeros(running=1, expired_leases=1)
        assert counts(type_stats(after, "b")) == zeros(running=1)
        assert len(await reap(state_adapter, now=now + 31 * SECOND, type_names=["a"])) == 1
        reaped = await queue_stats(state_adapter, now=now + 31 * SECOND)
        assert counts(type_stats(reaped, "a")) == zeros(pending=1, due=1)

    async def test_jobs_count_under_their_own_type_not_their_chains(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = (
            await run_and_complete(state_adapter, await start(state_adapter, now=now, type_name="a"), now=now)
        ).job
        await continue_chain(state_adapter, root, now=now, type_name="b")
        stats = await queue_stats(state_adapter, now=now)
        assert counts(type_stats(stats, "a")) == zeros(completed=1)
        assert counts(type_stats(stats, "b")) == zeros(pending=1, due=1)

    async def test_types_are_sorted_by_name_in_code_point_order(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        for type_name in ["beta", "alpha", "Zeta", "alpha-2"]:
            await start(state_adapter, now=now, type_name=type_name)
        assert names(await queue_stats(state_adapter, now=now)) == ["Zeta", "alpha", "alpha-2", "beta"]

    async def test_a_type_whose_jobs_are_gone_is_not_listed(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        gone = await start(state_adapter, now=now, type_name="gone")
        await start_completed_of(state_adapter, now, "kept")
        await in_transaction(state_adapter, lambda tx: tx.chains_delete(ChainsDelete(chain_ids=[gone.id])))
        assert names(await queue_stats(state_adapter, now=now)) == ["kept"]

    async def test_type_names_restrict_the_listing_and_name_types_without_jobs(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await start(state_adapter, now=now, type_name="a")
        await start(state_adapter, now=now, type_name="b")
        windows = (timedelta(minutes=5), timedelta(minutes=1))
        stats = await queue_stats(state_adapter, now=now, type_names=["unknown", "a", "a"], windows=windows)
        assert names(stats) == ["a", "unknown"]
        assert counts(stats.types[0]) == zeros(pending=1, due=1)
        unknown = stats.types[1]
        assert counts(unknown) == zeros()
        assert (unknown.oldest_due_at, unknown.durations, dict(unknown.failed_by_error_type)) == (
            None,
            None,
            {},
        )
        assert unknown.recent == tuple(
            WindowCounts(window=window, completed=0, failed=0, cancelled=0) for window in windows
        )

    async def test_stats_do_not_observe_an_uncommitted_write(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await start(state_adapter, now=now, type_name="a")
        params = QueueStatsGet(now=now)
        job = new_job(type_name="b")
        async with open_writer(state_adapter, lambda tx: tx.jobs_create(JobsCreate(jobs=[job], now=now))):
            assert names(await read(state_adapter, lambda tx: tx.queue_stats(params))) == ["a"]
        assert names(await read(state_adapter, lambda tx: tx.queue_stats(params))) == ["a", "b"]

    async def test_a_write_transaction_sees_its_own_changes(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        async with state_adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[new_job(type_name="a")], now=now))
            stats = await tx.queue_stats(QueueStatsGet(now=now))
        assert counts(type_stats(stats, "a")) == zeros(pending=1, due=1)

    async def test_now_defaults_to_the_backend_clock(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        async with state_adapter.transaction(read_only=True) as tx:
            stats = await tx.queue_stats(QueueStatsGet())
        assert stats.now.tzinfo is not None
        assert abs(stats.now - datetime.now(UTC)) < timedelta(minutes=5)

    @pytest.mark.parametrize(
        "arguments",
        [
            {"windows": [timedelta(0)]},
            {"windows": [timedelta(seconds=-1)]},
            {"windows": [timedelta(days=1, seconds=1)]},
            {"duration_window": timedelta(0)},
            {"duration_sample": -1},
            {"duration_sample": 100_001},
            {"throughput_step": timedelta(0)},
            {"throughput_window": timedelta(0)},
            {"throughput_window": timedelta(minutes=1441), "throughput_step": timedelta(minutes=1)},
        ],
    )
    async def test_invalid_parameters_are_refused(self, arguments: dict[str, object]) -> None:
        with pytest.raises(InvalidArgumentError):
            QueueStatsGet(**arguments)  # type: ignore[arg-type]


class QueueStatsTests(
    QueueStatsCountTests,
    QueueStatsErrorTypeTests,
    QueueStatsWindowTests,
    QueueStatsDurationTests,
    QueueStatsThroughputTests,
    JobsListLeasedByTests,
    StateSuiteBase,
):
    """Every queue_stats case, and the leased_by filter of jobs_list."""
