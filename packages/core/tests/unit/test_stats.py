"""jobchain.stats: the QueueStats/TypeStats conveniences and nearest-rank duration percentiles."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobchain.entities import JobStatus
from jobchain.stats import AttemptDurations, QueueStats, TypeStats, duration_percentiles

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
SECOND = timedelta(seconds=1)


def seconds(*values: int) -> list[timedelta]:
    return [value * SECOND for value in values]


A = TypeStats(
    type_name="a",
    blocked=1,
    pending=5,
    due=3,
    scheduled=2,
    running=4,
    expired_leases=1,
    completed=10,
    failed=2,
    cancelled=1,
    oldest_due_at=NOW - 90 * SECOND,
)
B = TypeStats(type_name="b", pending=2, due=2, failed=1, oldest_due_at=NOW - 30 * SECOND)


class TestTypeStats:
    def test_count_reads_the_figure_of_a_status_given_as_enum_or_string(self) -> None:
        assert [A.count(status) for status in JobStatus] == [1, 5, 4, 10, 2, 1]
        assert (A.count("pending"), A.count("cancelled")) == (5, 1)

    def test_count_of_an_unknown_status_raises(self) -> None:
        with pytest.raises(ValueError):
            A.count("due")  # a figure, not a status

    def test_total_is_every_status_not_the_due_split(self) -> None:
        assert A.total == 1 + 5 + 4 + 10 + 2 + 1
        assert TypeStats(type_name="empty").total == 0

    def test_a_type_without_figures_reads_as_zeros(self) -> None:
        empty = TypeStats(type_name="x")
        assert (empty.due, empty.expired_leases, empty.oldest_due_at, empty.durations) == (0, 0, None, None)
        assert (dict(empty.failed_by_error_type), empty.recent) == ({}, ())


class TestQueueStats:
    def test_get_returns_a_listed_type_and_zeros_for_any_other(self) -> None:
        stats = QueueStats(now=NOW, types=(A, B))
        assert stats.get("b") is B
        assert stats.get("missing") == TypeStats(type_name="missing")

    def test_total_sums_a_status_across_types(self) -> None:
        stats = QueueStats(now=NOW, types=(A, B))
        assert (stats.total(JobStatus.PENDING), stats.total("failed"), stats.total("blocked")) == (7, 3, 1)
        assert QueueStats(now=NOW).total("pending") == 0

    def test_due_sums_due_jobs_across_types(self) -> None:
        assert QueueStats(now=NOW, types=(A, B)).due == 5
        assert QueueStats(now=NOW).due == 0

    def test_oldest_due_age_is_measured_from_now_to_the_oldest_due_job(self) -> None:
        assert QueueStats(now=NOW, types=(B, A)).oldest_due_age == 90 * SECOND
        assert QueueStats(now=NOW, types=(B,)).oldest_due_age == 30 * SECOND

    def test_oldest_due_age_is_none_when_nothing_is_due(self) -> None:
        assert QueueStats(now=NOW).oldest_due_age is None
        assert (
            QueueStats(now=NOW, types=(TypeStats(type_name="a", pending=1, scheduled=1),)).oldest_due_age
            is None
        )

    def test_oldest_due_age_never_goes_negative(self) -> None:
        ahead = TypeStats(type_name="a", due=1, pending=1, oldest_due_at=NOW + SECOND)  # clock skew
        assert QueueStats(now=NOW, types=(ahead,)).oldest_due_age == timedelta(0)


class TestDurationPercentiles:
    def test_an_empty_sample_has_no_percentiles(self) -> None:
        assert duration_percentiles([]) is None
        assert duration_percentiles(iter(())) is None

    def test_one_value_is_every_percentile(self) -> None:
        assert duration_percentiles([7 * SECOND]) == AttemptDurations(
            count=1, p50=7 * SECOND, p95=7 * SECOND, p99=7 * SECOND, max=7 * SECOND
        )

    def test_nearest_rank_of_one_to_a_hundred(self) -> None:
        result = duration_percentiles(reversed(seconds(*range(1, 101))))
        assert result == AttemptDurations(
            count=100, p50=50 * SECOND, p95=95 * SECOND, p99=99 * SECOND, max=100 * SECOND
        )

    def test_nearest_rank_rounds_the_rank_up(self) -> None:
        # 20 values: p50 is the 10th, p95 the 19th, p99 the ceil(19.8) = 20th.
        assert duration_percentiles(seconds(*range(20, 0, -1))) == AttemptDurations(
            count=20, p50=10 * SECOND, p95=19 * SECOND, p99=20 * SECOND, max=20 * SECOND
        )
        # 3 values: p50 is the ceil(1.5) = 2nd, never an interpolation.
        assert duration_percentiles(seconds(9, 1, 4)) == AttemptDurations(
            count=3, p50=4 * SECOND, p95=9 * SECOND, p99=9 * SECOND, max=9 * SECOND
        )

    def test_the_order_of_the_sample_does_not_matter_and_duplicates_count(self) -> None:
        sample = seconds(5, 1, 5, 5, 2)
        assert duration_percentiles(sample) == duration_percentiles(sorted(sample))
        assert duration_percentiles(sample) == AttemptDurations(
            count=5, p50=5 * SECOND, p95=5 * SECOND, p99=5 * SECOND, max=5 * SECOND
        )

    @given(st.lists(st.integers(0, 10**9), min_size=1, max_size=300))
    def test_each_percentile_is_the_smallest_value_covering_its_share(self, micros: list[int]) -> None:
        sample = [timedelta(microseconds=value) for value in micros]
        result = duration_percentiles(sample)
        assert result is not None
        assert (result.count, result.max) == (len(sample), max(sample))
        assert result.p50 <= result.p95 <= result.p99 <= result.max
        for percent, value in [(50, result.p50), (95, result.p95), (99, result.p99)]:
            share = percent * len(sample)  # compared with 100 x the count, in integers
            assert value in sample
            assert 100 * sum(item <= value for item in sample) >= share
            assert 100 * sum(item < value for item in sample) < share

    @pytest.mark.parametrize("count", [1, 2, 19, 20, 21, 99, 100, 101, 1000, 1001, 99_999, 100_000])
    def test_ranks_are_exact_at_every_sample_size_the_contract_allows(self, count: int) -> None:
        result = duration_percentiles(timedelta(microseconds=value) for value in range(1, count + 1))
        assert result is not None
        for percent, value in [(50, result.p50), (95, result.p95), (99, result.p99)]:
            assert value == timedelta(microseconds=-(-percent * count // 100)), percent


def test_count_of_an_unknown_status_says_which_exist() -> None:
    from jobchain.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="blocked, pending, running"):
        TypeStats(type_name="t").count("due")
