"""queue_stats over time: recent windows, attempt durations and throughput buckets.

Choices pinned here (the in-process reference's):

- a window holds the jobs whose ``completed_at`` / ``failed_at`` / ``cancelled_at`` (by their
  current status) is at or after ``now - window``: the boundary is inclusive. ``recent`` has
  one entry per requested window, in the order asked;
- the duration sample is the type's completed jobs with ``completed_at >= now -
  duration_window`` that were claimed (``attempt_started_at`` set; a workerless completion
  has no duration), the ``duration_sample`` most recent by ``completed_at`` (equal times: the
  greater job id, in code point order, first); each duration is
  ``completed_at - attempt_started_at``; percentiles are nearest-rank
  (:func:`jobchain.stats.duration_percentiles`); no sample (or ``duration_sample=0``): None;
- throughput has ``ceil(throughput_window / throughput_step)`` buckets, oldest first, each
  starting at a whole multiple of the step since the Unix epoch, the last one holding
  ``now``; a bucket counts completed and failed jobs (not cancelled ones) of EVERY type,
  whatever ``type_names`` says, finished in ``[start, start + step)``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobchain.contracts import StateAdapter
from jobchain.entities import Job
from jobchain.stats import STATS_WINDOWS, AttemptDurations, ThroughputBucket, WindowCounts
from jobchain_conformance.helpers import (
    WORKER,
    acquire_job,
    cancel,
    complete,
    fail,
    queue_stats,
    retry,
    start,
)

SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def floor_to(at: datetime, step: timedelta) -> datetime:
    """The last whole multiple of ``step`` since the Unix epoch at or before ``at``."""
    return EPOCH + step * ((at - EPOCH) // step)


async def completed_at(adapter: StateAdapter, at: datetime, *, type_name: str = "a") -> Job:
    """A job created an hour before ``at`` and completed at ``at`` without a worker."""
    job = await start(adapter, now=at - HOUR, type_name=type_name)
    return (await complete(adapter, job.id, now=at)).job


async def failed_at(adapter: StateAdapter, at: datetime, *, type_name: str = "a") -> Job:
    """A job created an hour before ``at`` and failed at ``at`` without a worker."""
    job = await start(adapter, now=at - HOUR, type_name=type_name)
    return (await fail(adapter, job.id, now=at)).job


async def cancelled_at(adapter: StateAdapter, at: datetime, *, type_name: str = "a") -> Job:
    """A chain created an hour before ``at`` and cancelled at ``at``."""
    job = await start(adapter, now=at - HOUR, type_name=type_name)
    cancelled = (await cancel(adapter, [job.id], now=at)).cancelled
    assert len(cancelled) == 1, f"cancelling one chain cancelled {len(cancelled)}"
    return cancelled[0]


async def claimed(adapter: StateAdapter, at: datetime, *, type_name: str = "a") -> Job:
    """A new job claimed at ``at`` with an hour's lease (no other pending job of its type)."""
    job = await start(adapter, now=at, type_name=type_name)
    return await acquire_job(adapter, job, now=at, lease_for=HOUR)


async def finish(adapter: StateAdapter, job: Job, at: datetime) -> Job:
    """Complete the claimed ``job`` as its worker at ``at``."""
    done = await complete(adapter, job.id, now=at, worker_id=WORKER, lease_generation=job.lease_generation)
    return done.job


async def ran(adapter: StateAdapter, at: datetime, took: timedelta, *, type_name: str = "a") -> Job:
    """A job claimed at ``at`` and completed by its worker ``took`` later."""
    return await finish(adapter, await claimed(adapter, at, type_name=type_name), at + took)


def window_counts(window: timedelta, completed: int = 0, failed: int = 0, cancelled: int = 0) -> WindowCounts:
    return WindowCounts(window=window, completed=completed, failed=failed, cancelled=cancelled)


def seconds(*values: float) -> list[timedelta]:
    return [timedelta(seconds=value) for value in values]


def buckets(*rows: tuple[datetime, int, int]) -> list[ThroughputBucket]:
    return [ThroughputBucket(start=start, completed=done, failed=failed) for start, done, failed in rows]


class QueueStatsWindowTests:
    """Jobs finished within each recent window, the boundary included."""

    async def test_windows_count_jobs_finished_at_or_after_now_minus_window(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await completed_at(state_adapter, now - SECOND)
        await completed_at(state_adapter, now)
        await failed_at(state_adapter, now + 30 * SECOND)
        await cancelled_at(state_adapter, now + 60 * SECOND)
        await completed_at(state_adapter, now + 90 * SECOND)
        await completed_at(state_adapter, now + 100 * SECOND, type_name="b")
        windows = seconds(90, 30, 120, 60, 119)
        stats = await queue_stats(state_adapter, now=now + 120 * SECOND, windows=windows)
        assert stats.get("a").recent == (
            window_counts(windows[0], completed=1, failed=1, cancelled=1),
            window_counts(windows[1], completed=1),
            window_counts(windows[2], completed=2, failed=1, cancelled=1),
            window_counts(windows[3], completed=1, cancelled=1),
            window_counts(windows[4], completed=1, failed=1, cancelled=1),
        )
        assert stats.get("b").recent[2] == window_counts(windows[2], completed=1)

    async def test_the_default_windows_are_one_five_and_fifteen_minutes(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await completed_at(state_adapter, now - 2 * MINUTE)
        await failed_at(state_adapter, now - 10 * MINUTE)
        await cancelled_at(state_adapter, now - 15 * MINUTE)
        await completed_at(state_adapter, now - 16 * MINUTE)
        stats = await queue_stats(state_adapter, now=now)
        assert STATS_WINDOWS == (MINUTE, 5 * MINUTE, 15 * MINUTE)
        assert stats.get("a").recent == (
            window_counts(MINUTE),
            window_counts(5 * MINUTE, completed=1),
            window_counts(15 * MINUTE, completed=1, failed=1, cancelled=1),
        )

    async def test_a_retried_job_no_longer_counts_as_failed(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await failed_at(state_adapter, now)
        await retry(state_adapter, [job.id], now=now + SECOND)
        stats = await queue_stats(state_adapter, now=now + 2 * SECOND, windows=[MINUTE])
        assert stats.get("a").recent == (window_counts(MINUTE),)


class QueueStatsDurationTests:
    """Claim-to-completion durations of a type's most recent completions, nearest-rank."""

    async def test_durations_are_nearest_rank_percentiles_of_claim_to_completion(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        for index in range(20):  # 1..20 seconds, in a scrambled order
            took = timedelta(seconds=(7 * index) % 20 + 1, milliseconds=250)
            await ran(state_adapter, now + 30 * SECOND * index, took)
        await ran(state_adapter, now, 90 * SECOND, type_name="b")
        stats = await queue_stats(state_adapter, now=now + 15 * MINUTE, duration_window=HOUR)
        extra = timedelta(milliseconds=250)
        assert stats.get("a").durations == AttemptDurations(
            count=20,
            p50=10 * SECOND + extra,
            p95=19 * SECOND + extra,
            p99=20 * SECOND + extra,
            max=20 * SECOND + extra,
        )
        assert stats.get("b").durations == AttemptDurations(
            count=1, p50=90 * SECOND, p95=90 * SECOND, p99=90 * SECOND, max=90 * SECOND
        )

    async def test_the_sample_is_the_most_recent_completions_up_to_the_cap(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        slow = await claimed(state_adapter, now)  # claimed first, completed last
        for index in range(3):
            await ran(state_adapter, now + (200 * index + 10) * SECOND, 100 * SECOND)
        for index in range(1, 4):
            await ran(state_adapter, now + (600 + 10 * index) * SECOND, index * SECOND)
        await finish(state_adapter, slow, now + 1000 * SECOND)
        at = now + 1100 * SECOND
        capped = await queue_stats(state_adapter, now=at, duration_window=HOUR, duration_sample=4)
        assert capped.get("a").durations == AttemptDurations(
            count=4, p50=2 * SECOND, p95=1000 * SECOND, p99=1000 * SECOND, max=1000 * SECOND
        )
        whole = await queue_stats(state_adapter, now=at, duration_window=HOUR, duration_sample=7)
        assert whole.get("a").durations == AttemptDurations(
            count=7, p50=100 * SECOND, p95=1000 * SECOND, p99=1000 * SECOND, max=1000 * SECOND
        )
        one = await queue_stats(state_adapter, now=at, duration_window=HOUR, duration_sample=1)
        assert one.get("a").durations == AttemptDurations(
            count=1, p50=1000 * SECOND, p95=1000 * SECOND, p99=1000 * SECOND, max=1000 * SECOND
        )

    async def test_completions_at_the_same_time_are_sampled_greater_id_first(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = await claimed(state_adapter, now)
        second = await claimed(state_adapter, now + 10 * SECOND)
        await finish(state_adapter, first, now + 20 * SECOND)
        await finish(state_adapter, second, now + 20 * SECOND)
        took = 20 * SECOND if first.id > second.id else 10 * SECOND
        stats = await queue_stats(state_adapter, now=now + MINUTE, duration_sample=1)
        assert stats.get("a").durations == AttemptDurations(count=1, p50=took, p95=took, p99=took, max=took)

    async def test_completions_before_the_duration_window_are_left_out(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        window = 10 * MINUTE
        await ran(state_adapter, now - 50 * SECOND, 49 * SECOND)  # completed a second too early
        await ran(state_adapter, now - 5 * SECOND, 5 * SECOND)  # completed exactly at the cutoff
        await ran(state_adapter, now + MINUTE, 2 * SECOND)
        stats = await queue_stats(state_adapter, now=now + window, duration_window=window)
        assert stats.get("a").durations == AttemptDurations(
            count=2, p50=2 * SECOND, p95=5 * SECOND, p99=5 * SECOND, max=5 * SECOND
        )

    async def test_a_workerless_completion_has_no_duration(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await completed_at(state_adapter, now)
        await ran(state_adapter, now, 3 * SECOND)
        await completed_at(state_adapter, now + 5 * SECOND)
        stats = await queue_stats(state_adapter, now=now + MINUTE, duration_sample=1)
        assert stats.get("a").durations == AttemptDurations(
            count=1, p50=3 * SECOND, p95=3 * SECOND, p99=3 * SECOND, max=3 * SECOND
        )

    async def test_no_sample_means_no_durations(self, state_adapter: StateAdapter, now: datetime) -> None:
        await ran(state_adapter, now, 3 * SECOND)
        await start(state_adapter, now=now, type_name="b")
        await failed_at(state_adapter, now, type_name="c")
        assert (await queue_stats(state_adapter, now=now + MINUTE, duration_sample=0)).get(
            "a"
        ).durations is None
        stats = await queue_stats(state_adapter, now=now + MINUTE)
        assert stats.get("a").durations is not None
        assert (stats.get("b").durations, stats.get("c").durations) == (None, None)


class QueueStatsThroughputTests:
    """Completed and failed jobs of every type per step, in buckets aligned to the epoch."""

    async def test_there_is_no_throughput_unless_asked(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await completed_at(state_adapter, now)
        assert (await queue_stats(state_adapter, now=now)).throughput == ()

    async def test_buckets_are_aligned_oldest_first_the_last_holding_now(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        aligned = floor_to(now + 10 * MINUTE, MINUTE)
        await completed_at(state_adapter, aligned - 181 * SECOND)  # before the first bucket
        await completed_at(state_adapter, aligned - 180 * SECOND)
        await failed_at(state_adapter, aligned - SECOND, type_name="b")
        await completed_at(state_adapter, aligned)
        await completed_at(state_adapter, aligned + 59 * SECOND, type_name="b")
        await cancelled_at(state_adapter, aligned + 10 * SECOND)
        await failed_at(state_adapter, aligned + MINUTE)
        await completed_at(state_adapter, aligned + 90 * SECOND)
        stats = await queue_stats(
            state_adapter,
            now=aligned + 90 * SECOND,
            type_names=["a"],
            throughput_window=5 * MINUTE,
            throughput_step=MINUTE,
        )
        assert list(stats.throughput) == buckets(
            (aligned - 3 * MINUTE, 1, 0),
            (aligned - 2 * MINUTE, 0, 0),
            (aligned - MINUTE, 0, 1),
            (aligned, 2, 0),
            (aligned + MINUTE, 1, 1),
        )

    async def test_now_on_a_bucket_boundary_starts_the_last_bucket(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        aligned = floor_to(now + 10 * MINUTE, MINUTE)
        await completed_at(state_adapter, aligned - SECOND)
        await completed_at(state_adapter, aligned)
        stats = await queue_stats(
            state_adapter, now=aligned, throughput_window=2 * MINUTE, throughput_step=MINUTE
        )
        assert list(stats.throughput) == buckets((aligned - MINUTE, 1, 0), (aligned, 1, 0))

    async def test_the_bucket_count_is_the_window_over_the_step_rounded_up(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        step = 30 * SECOND
        at = floor_to(now, step) + 12 * SECOND
        last = floor_to(now, step)
        for window, count in [(90 * SECOND, 3), (91 * SECOND, 4), (100 * SECOND, 4), (10 * SECOND, 1)]:
            stats = await queue_stats(state_adapter, now=at, throughput_window=window, throughput_step=step)
            starts = [bucket.start for bucket in stats.throughput]
            assert starts == [last - step * (count - 1 - index) for index in range(count)], window

    async def test_a_step_that_does_not_divide_a_minute_aligns_to_its_own_multiples(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        step = 7 * SECOND
        last = floor_to(now, step)
        await completed_at(state_adapter, last - SECOND)
        await failed_at(state_adapter, last)
        await completed_at(state_adapter, last + 3 * SECOND)
        stats = await queue_stats(
            state_adapter, now=last + 3 * SECOND, throughput_window=21 * SECOND, throughput_step=step
        )
        assert list(stats.throughput) == buckets((last - 2 * step, 0, 0), (last - step, 1, 0), (last, 1, 1))

    async def test_an_empty_store_has_buckets_of_zeros(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        last = floor_to(now, MINUTE)
        stats = await queue_stats(state_adapter, now=now, throughput_window=3 * MINUTE)
        assert list(stats.throughput) == buckets(
            (last - 2 * MINUTE, 0, 0), (last - MINUTE, 0, 0), (last, 0, 0)
        )
