"""The queue_stats cases catch broken adapters: deliberately wrong variants of the in-process
adapter must fail named cases of ``QueueStatsTests``, while the correct control passes them.

Each variant wraps the memory adapter's transaction. Where the bug can be built from the
contract (an exclusive window boundary is the reference asked one microsecond less; a sample
that ignores its cap is the reference asked for every completion), the variant rewrites the
parameters or the result; where it cannot (the first error's type, ties in the order first
seen, misaligned buckets), it swaps one named function of ``jobchain.memory._stats`` for the
duration of one call and always puts back the original saved at import. Only the queue_stats
cases (and the hypothesis model, for the variants it is listed under) run against the
variants, which keeps this run short.
"""

from __future__ import annotations

import pytest

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""

VARIANTS = '''
import dataclasses
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta

import pytest
from hypothesis import Phase, settings

from jobchain.contracts import JobsList
from jobchain.memory import _stats
from jobchain.memory.state import MemoryStateAdapter
from jobchain.stats import ERROR_TYPES_KEPT
from jobchain_conformance.model import MODEL_SETTINGS, ModelTests
from jobchain_conformance.suites.state_queue_stats import QueueStatsTests

MICROSECOND = timedelta(microseconds=1)
ORIGINALS = {name: getattr(_stats, name) for name in ["last_error_type", "top_error_types", "bucket_starts"]}


@contextmanager
def swapped(name, replacement):
    """``_stats.name`` is ``replacement`` inside the block; the original saved at import after."""
    setattr(_stats, name, replacement)
    try:
        yield
    finally:
        setattr(_stats, name, ORIGINALS[name])


class WrappedTx:
    """Delegates every operation to the memory transaction; variants override one."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    @asynccontextmanager
    async def _nested(self):
        async with self._inner.savepoint() as inner:
            yield type(self)(inner)

    def savepoint(self):
        return self._nested()


class WrappedAdapter:
    tx_class = WrappedTx

    def __init__(self):
        self._inner = MemoryStateAdapter()
        self.capabilities = self._inner.capabilities
        self.time_precision = self._inner.time_precision

    @asynccontextmanager
    async def _open(self, read_only, connection):
        async with self._inner.transaction(read_only=read_only, connection=connection) as tx:
            yield self.tx_class(tx)

    def transaction(self, *, read_only=False, connection=None):
        return self._open(read_only, connection)

    async def migrate(self):
        await self._inner.migrate()

    async def close(self):
        await self._inner.close()


def with_types(stats, change):
    """``stats`` with ``change(type_stats)`` applied to every type."""
    return dataclasses.replace(stats, types=tuple(change(item) for item in stats.types))


class ExclusiveWindowTx(WrappedTx):
    """Bug (a): a window leaves out what finished exactly at ``now - window``."""

    async def queue_stats(self, params):
        shorter = tuple(window - MICROSECOND for window in params.windows)
        stats = await self._inner.queue_stats(dataclasses.replace(params, windows=shorter))

        def restore(item):
            pairs = zip(item.recent, params.windows)
            recent = tuple(dataclasses.replace(counts, window=window) for counts, window in pairs)
            return dataclasses.replace(item, recent=recent)

        return with_types(stats, restore)


class ExpiredLeasesIgnoredTx(WrappedTx):
    """Bug (b): a running job past its lease is not counted as an expired lease."""

    async def queue_stats(self, params):
        stats = await self._inner.queue_stats(params)
        return with_types(stats, lambda item: dataclasses.replace(item, expired_leases=0))


class LeaseEndingNowExpiredTx(WrappedTx):
    """Bug (c): a lease ending exactly now counts as expired (``<=`` instead of ``<``)."""

    async def queue_stats(self, params):
        stats = await self._inner.queue_stats(params)
        later = await self._inner.queue_stats(dataclasses.replace(params, now=stats.now + MICROSECOND))
        expired = {item.type_name: item.expired_leases for item in later.types}
        return with_types(
            stats, lambda item: dataclasses.replace(item, expired_leases=expired[item.type_name])
        )


class DueIncludesFutureTx(WrappedTx):
    """Bug (d): every pending job counts as due, scheduled ones too."""

    async def queue_stats(self, params):
        stats = await self._inner.queue_stats(params)
        return with_types(stats, lambda item: dataclasses.replace(item, due=item.pending, scheduled=0))


class FirstErrorTypeTx(WrappedTx):
    """Bug (e): failures are counted by their FIRST recorded error's type."""

    async def queue_stats(self, params):
        first = lambda job: job.attempt_errors[0].error_type if job.attempt_errors else ""  # noqa: E731
        with swapped("last_error_type", first):
            return await self._inner.queue_stats(params)


class TiesFirstSeenTx(WrappedTx):
    """Bug (f): error types of equal counts are kept in the order first seen, not by name."""

    async def queue_stats(self, params):
        with swapped("top_error_types", lambda counts: dict(Counter(counts).most_common(ERROR_TYPES_KEPT))):
            return await self._inner.queue_stats(params)


class UncappedSampleTx(WrappedTx):
    """Bug (g): the duration sample ignores ``duration_sample`` (every completion counts)."""

    async def queue_stats(self, params):
        if params.duration_sample:
            params = dataclasses.replace(params, duration_sample=100_000)
        return await self._inner.queue_stats(params)


class UnboundedDurationWindowTx(WrappedTx):
    """Bug (h): the duration sample ignores ``duration_window``."""

    async def queue_stats(self, params):
        forever = dataclasses.replace(params, duration_window=timedelta(days=3650))
        return await self._inner.queue_stats(forever)


def _ending_at_now(now, window, step):
    count = -(-window // step)
    return [now - step * (count - index) for index in range(count)]


class BucketsEndAtNowTx(WrappedTx):
    """Bug (i): throughput buckets end at ``now`` instead of starting at multiples of the step."""

    async def queue_stats(self, params):
        with swapped("bucket_starts", _ending_at_now):
            return await self._inner.queue_stats(params)


def _floor_count(now, window, step):
    starts = ORIGINALS["bucket_starts"](now, window, step)
    return starts[len(starts) - window // step :]


class TooFewBucketsTx(WrappedTx):
    """Bug (j): ``window // step`` buckets (rounded down), not ``ceil(window / step)``."""

    async def queue_stats(self, params):
        with swapped("bucket_starts", _floor_count):
            return await self._inner.queue_stats(params)


class CollatedOrderTx(WrappedTx):
    """Bug (k): types sorted case-insensitively (a database collation), not by code point."""

    async def queue_stats(self, params):
        stats = await self._inner.queue_stats(params)
        ordered = sorted(stats.types, key=lambda item: item.type_name.lower())
        return dataclasses.replace(stats, types=tuple(ordered))


class UnknownTypesOmittedTx(WrappedTx):
    """Bug (l): a named type without jobs is left out instead of listed with zeros."""

    async def queue_stats(self, params):
        stats = await self._inner.queue_stats(params)
        return dataclasses.replace(stats, types=tuple(item for item in stats.types if item.total))


class LeasedByIgnoredTx(WrappedTx):
    """Bug (m): jobs_list ignores the leased_by filter."""

    async def jobs_list(self, params):
        return await self._inner.jobs_list(dataclasses.replace(params, leased_by=()))


class LeasedByHistoryTx(WrappedTx):
    """Bug (n): leased_by ignores the status: it also matches jobs the worker completed."""

    async def jobs_list(self, params):
        if not params.leased_by:
            return await self._inner.jobs_list(params)
        page = await self._inner.jobs_list(dataclasses.replace(params, leased_by=()))
        wanted = set(params.leased_by)
        items = [job for job in page.items if job.leased_by in wanted or job.completed_by in wanted]
        return dataclasses.replace(page, items=items)


def stats_suite(tx_class, *, with_model=False):
    class Variant(WrappedAdapter):
        pass

    Variant.tx_class = tx_class
    bases = (QueueStatsTests, ModelTests) if with_model else (QueueStatsTests,)

    class Suite(*bases):
        @pytest.fixture
        async def state_adapter(self) -> AsyncIterator[WrappedAdapter]:
            adapter = Variant()
            yield adapter
            await adapter.close()

        @pytest.fixture
        def model_settings(self):
            return settings(MODEL_SETTINGS, phases=[Phase.generate], derandomize=True)

    return Suite


TestCorrect = stats_suite(WrappedTx, with_model=True)
TestExclusiveWindow = stats_suite(ExclusiveWindowTx)
TestExpiredLeasesIgnored = stats_suite(ExpiredLeasesIgnoredTx)
TestLeaseEndingNowExpired = stats_suite(LeaseEndingNowExpiredTx)
TestDueIncludesFuture = stats_suite(DueIncludesFutureTx, with_model=True)
TestFirstErrorType = stats_suite(FirstErrorTypeTx)
TestTiesFirstSeen = stats_suite(TiesFirstSeenTx, with_model=True)
TestUncappedSample = stats_suite(UncappedSampleTx)
TestUnboundedDurationWindow = stats_suite(UnboundedDurationWindowTx)
TestBucketsEndAtNow = stats_suite(BucketsEndAtNowTx)
TestTooFewBuckets = stats_suite(TooFewBucketsTx)
TestCollatedOrder = stats_suite(CollatedOrderTx)
TestUnknownTypesOmitted = stats_suite(UnknownTypesOmittedTx, with_model=True)
TestLeasedByIgnored = stats_suite(LeasedByIgnoredTx, with_model=True)
TestLeasedByHistory = stats_suite(LeasedByHistoryTx)
'''

# variant class → cases that must fail against it (and pass against the correct control).
# The model runs derandomized (see stats_suite) without Hypothesis's literals from local
# modules (conftest's without_local_constants), so what it explores does not change with
# unrelated code; it is listed only under the variants it catches. The named example cases
# are the guard for the others.
MUST_FAIL = {
    "TestExclusiveWindow": [
        "test_windows_count_jobs_finished_at_or_after_now_minus_window",
        "test_the_default_windows_are_one_five_and_fifteen_minutes",
    ],
    "TestExpiredLeasesIgnored": [
        "test_an_expired_lease_is_a_running_job_past_its_leased_until",
    ],
    "TestLeaseEndingNowExpired": [
        "test_an_expired_lease_is_a_running_job_past_its_leased_until",
    ],
    "TestDueIncludesFuture": [
        "test_adapter_agrees_with_reference_model",
        "test_every_status_is_counted_per_type",
        "test_a_job_scheduled_exactly_now_is_due_and_a_later_one_scheduled",
        "test_oldest_due_at_is_the_longest_waiting_due_job_of_each_type",
    ],
    "TestFirstErrorType": [
        "test_failed_jobs_count_by_the_type_of_their_last_error",
    ],
    "TestTiesFirstSeen": [
        "test_adapter_agrees_with_reference_model",
        "test_the_most_frequent_types_are_kept_ties_by_name",
    ],
    "TestUncappedSample": [
        "test_the_sample_is_the_most_recent_completions_up_to_the_cap",
    ],
    "TestUnboundedDurationWindow": [
        "test_completions_before_the_duration_window_are_left_out",
    ],
    "TestBucketsEndAtNow": [
        "test_buckets_are_aligned_oldest_first_the_last_holding_now",
        "test_now_on_a_bucket_boundary_starts_the_last_bucket",
        "test_the_bucket_count_is_the_window_over_the_step_rounded_up",
        "test_a_step_that_does_not_divide_a_minute_aligns_to_its_own_multiples",
        "test_an_empty_store_has_buckets_of_zeros",
    ],
    "TestTooFewBuckets": [
        "test_the_bucket_count_is_the_window_over_the_step_rounded_up",
    ],
    "TestCollatedOrder": [
        "test_types_are_sorted_by_name_in_code_point_order",
    ],
    "TestUnknownTypesOmitted": [
        "test_adapter_agrees_with_reference_model",
        "test_type_names_restrict_the_listing_and_name_types_without_jobs",
    ],
    "TestLeasedByIgnored": [
        "test_adapter_agrees_with_reference_model",
        "test_leased_by_lists_the_running_jobs_of_those_workers",
        "test_jobs_a_worker_finished_or_gave_back_are_not_listed",
        "test_leased_by_combines_with_other_filters_and_pages",
    ],
    "TestLeasedByHistory": [
        "test_jobs_a_worker_finished_or_gave_back_are_not_listed",
    ],
}
CONTROL = "TestCorrect"

Outcomes = dict[tuple[str, str], set[str]]


class _Recorder:
    """A pytest plugin object collecting every phase report of the inner run."""

    def __init__(self) -> None:
        self.outcomes: Outcomes = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        _, cls, name = report.nodeid.split("::")
        self.outcomes.setdefault((cls, name.split("[")[0]), set()).add(report.outcome)


# One worker runs the inner session once (a module fixture runs again on every worker).
pytestmark = [pytest.mark.timeout(600), pytest.mark.xdist_group("catches_stats_bugs")]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory, without_local_constants: None) -> Outcomes:
    """Run the queue_stats cases once, in-process, against every variant; (class, case) → outcomes."""
    root = tmp_path_factory.mktemp("stats_variants")
    (root / "pytest.ini").write_text(INI)
    (root / "test_stats_variants.py").write_text(VARIANTS)
    recorder = _Recorder()
    args = [
        "-q",
        "--tb=no",  # only outcomes matter (and see test_suite_catches_bugs on CPython 3.11.7)
        "-p",
        "no:cacheprovider",
        "-p",
        "no:unraisableexception",
        "--import-mode=importlib",
        f"--rootdir={root}",
        "-c",
        str(root / "pytest.ini"),
    ]
    exit_code = pytest.main([*args, str(root)], plugins=[recorder])
    assert exit_code in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), (
        f"inner run ended with {exit_code!r}"
    )
    return recorder.outcomes


def _failed(outcomes: Outcomes, cls: str, name: str) -> bool:
    assert (cls, name) in outcomes, f"{cls}::{name} did not run; was the case renamed?"
    return "failed" in outcomes[(cls, name)]


@pytest.mark.parametrize(
    ("variant", "case"), [(variant, case) for variant, cases in MUST_FAIL.items() for case in cases]
)
def test_broken_variant_fails_the_named_case(outcomes: Outcomes, variant: str, case: str) -> None:
    assert _failed(outcomes, variant, case), f"the suite let {variant} pass {case}"
    assert not _failed(outcomes, CONTROL, case), f"{case} fails on the correct adapter too"


def test_the_correct_control_passes_every_queue_stats_case(outcomes: Outcomes) -> None:
    cases = [case for cls, case in outcomes if cls == CONTROL]
    assert len(cases) > 30, f"too few queue_stats cases ran: {len(cases)}"
    assert sorted(case for case in cases if "failed" in outcomes[(CONTROL, case)]) == []
