"""The fenced-heartbeat cases catch broken adapters (issue 35, deliver 3): deliberately wrong
variants of the in-process adapter must fail named cases of ``WorkerIncarnationTests``, while
the correct control passes them all.

Each variant wraps the memory adapter's transaction and rewrites one heartbeat: it raises the
incarnation past the stored one (so the fence never holds), or runs the dead-worker release
the fence skipped. Only the incarnation and registry cases run against the variants, which
keeps this run short.
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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from jobchain.entities import WorkerState
from jobchain.memory import _workers
from jobchain.memory.state import MemoryStateAdapter
from jobchain_conformance.suites._base import StateSuiteBase
from jobchain_conformance.suites.state_worker_incarnation import WorkerIncarnationTests
from jobchain_conformance.suites.state_workers import WorkerHeartbeatTests


class WrappedTx:
    """Delegates every operation to the memory transaction; variants override one."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    async def worker_heartbeat(self, params):
        return await self._inner.worker_heartbeat(params)

    def _stored(self, worker_id):
        """The committed (or this transaction's) row and incarnation of ``worker_id``."""
        table = self._inner._adapter._store.workers
        return table.rows.get(worker_id), table.incarnations.get(worker_id, 0)


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


class SameIncarnationRevivesTx(WrappedTx):
    """Bug (a): a heartbeat of a dead row's incarnation brings the row back to running (the
    behaviour before issue 35: a late heartbeat from a partition resurrects the worker)."""

    async def worker_heartbeat(self, params):
        row, stored = self._stored(params.worker_id)
        if row is not None and row.state is WorkerState.DEAD and params.incarnation == stored:
            params = dataclasses.replace(params, incarnation=stored + 1)
        return await self._inner.worker_heartbeat(params)


class OlderIncarnationOverwritesTx(WrappedTx):
    """Bug (b): a heartbeat of an earlier incarnation overwrites the row of a later one (only
    the incarnation is compared with the dead state, not with the stored number)."""

    async def worker_heartbeat(self, params):
        row, stored = self._stored(params.worker_id)
        if row is not None and row.state is not WorkerState.DEAD and params.incarnation < stored:
            params = dataclasses.replace(params, incarnation=stored)
        return await self._inner.worker_heartbeat(params)


class FencedStillReleasesTx(WrappedTx):
    """Bug (c): a fenced heartbeat still marks lapsed workers dead and releases their jobs (a
    presumed-dead worker rescues other workers' work)."""

    async def worker_heartbeat(self, params):
        def op(ctx, now):
            result = _workers.worker_heartbeat(ctx, params, now)
            if result.was_dead and params.release_dead:
                dead_ids = _workers._mark_dead(ctx, params.worker_id, now)
                released = _workers._release_jobs(ctx, dead_ids, now)
                result = dataclasses.replace(result, dead_worker_ids=dead_ids, released_jobs=released)
            return result

        return await self._inner._write(op, params.now)


def incarnation_suite(tx_class):
    class Variant(WrappedAdapter):
        pass

    Variant.tx_class = tx_class

    class Suite(WorkerIncarnationTests, WorkerHeartbeatTests, StateSuiteBase):
        @pytest.fixture
        async def state_adapter(self) -> AsyncIterator[WrappedAdapter]:
            adapter = Variant()
            yield adapter
            await adapter.close()

    return Suite


TestCorrect = incarnation_suite(WrappedTx)
TestSameIncarnationRevives = incarnation_suite(SameIncarnationRevivesTx)
TestOlderIncarnationOverwrites = incarnation_suite(OlderIncarnationOverwritesTx)
TestFencedStillReleases = incarnation_suite(FencedStillReleasesTx)
'''

# variant class → cases that must fail against it (and pass against the correct control).
MUST_FAIL = {
    "TestSameIncarnationRevives": [
        "test_a_heartbeat_of_the_dead_rows_incarnation_keeps_it_dead",
        "test_every_heartbeat_of_a_dead_incarnation_says_was_dead",
        "test_a_stopping_heartbeat_of_a_dead_incarnation_does_not_stop_the_row",
        "test_a_fenced_heartbeat_releases_no_other_workers_jobs",
        "test_heartbeat_of_a_worker_marked_dead_reports_was_dead_and_a_rejoin_revives_it",
        "test_was_dead_is_reported_until_the_worker_rejoins",
    ],
    "TestOlderIncarnationOverwrites": [
        "test_a_first_heartbeat_registers_whatever_its_incarnation",
        "test_a_late_heartbeat_of_an_earlier_incarnation_after_a_rejoin_changes_nothing",
        "test_an_earlier_incarnation_never_overwrites_a_live_later_one",
        "test_a_late_heartbeat_of_an_earlier_incarnation_releases_nothing",
    ],
    "TestFencedStillReleases": [
        "test_a_fenced_heartbeat_releases_no_other_workers_jobs",
        "test_a_late_heartbeat_of_an_earlier_incarnation_releases_nothing",
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
pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("catches_incarnation_bugs")]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Outcomes:
    """Run the incarnation cases once, in-process, against every variant; (class, case) → outcomes."""
    root = tmp_path_factory.mktemp("incarnation_variants")
    (root / "pytest.ini").write_text(INI)
    (root / "test_incarnation_variants.py").write_text(VARIANTS)
    recorder = _Recorder()
    args = [
        "-q",
        "--tb=no",
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


def test_the_correct_control_passes_every_incarnation_case(outcomes: Outcomes) -> None:
    cases = [case for cls, case in outcomes if cls == CONTROL]
    assert len(cases) >= 10, f"too few incarnation cases ran: {len(cases)}"
    assert sorted(case for case in cases if "failed" in outcomes[(CONTROL, case)]) == []
    skipped = sorted(case for case in cases if "skipped" in outcomes[(CONTROL, case)])
    assert skipped == [], f"the correct control skipped {skipped}"
