"""The suite catches adapters that release a job blocked by two chains completing at once
wrongly: the concurrent-unblock cases must fail against them, while the same cases pass against
the correct control, and the older blocker and concurrency cases pass against all of them
(they could not see these bugs).

The variants are the in-process adapter with one decision changed:

- stale snapshot (REPEATABLE READ): a completion counts the dependent's other blocker chains
  as they were when its transaction began. Its locks still wait, as PostgreSQL's do under
  REPEATABLE READ, so the second of two concurrent completions waits for the first and then
  decides on what it saw before the first committed;
- no lock on the dependent: a completion decides without locking the dependent's row, so the
  second does not wait and cannot see the first's uncommitted completion.

They need the reference's internals (the view and row locks a write operation works
through), so they subclass them. Every variant also offers ``jobs_complete`` (completion by
completion), so the group cases run against them.
"""

from __future__ import annotations

import pytest

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""

VARIANTS = '''
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from jobchain.contracts import COMPLETION_REFUSALS
from jobchain.entities import JobStatus
from jobchain.errors import TransientStateError
from jobchain.memory import _writes
from jobchain.memory._views import View, view_for
from jobchain.memory.state import MemoryStateAdapter, MemoryStateTx
from jobchain_conformance.suites._base import StateSuiteBase
from jobchain_conformance.suites.state_chains import JobCompleteUnblockingTests, JobsCreateBlockersTests
from jobchain_conformance.suites.state_concurrent_unblock import ConcurrentUnblockTests
from jobchain_conformance.suites.state_isolation import ConcurrencyTests


class BatchingTx(MemoryStateTx):
    """The reference transaction plus jobs_complete, one job_complete per item."""

    async def jobs_complete(self, params):
        results = []
        for item in params:
            try:
                results.append(await self.job_complete(item))
            except COMPLETION_REFUSALS as refusal:
                results.append(refusal)
        return results


class StaleView(View):
    """The transaction's view, except that chains it has not written read as they were when
    the transaction began (REPEATABLE READ's snapshot plus the transaction's own changes)."""

    def __init__(self, fresh, snapshot, tx):
        self._fresh, self._snapshot, self._tx = fresh, snapshot, tx

    def chain_jobs(self, chain_id):
        jobs = self._fresh.chain_jobs(chain_id)
        if any(job.id in self._tx.touched for job in jobs):
            return jobs
        return self._snapshot.get(chain_id, [])

    def job(self, job_id):
        return self._fresh.job(job_id)

    def blockers(self, job_id):
        return self._fresh.blockers(job_id)

    def dependents(self, chain_id):
        return self._fresh.dependents(chain_id)

    def dedup_roots(self, key, chain_type_name):
        return self._fresh.dedup_roots(key, chain_type_name)

    def walk(self, *, roots, descending, after):
        return self._fresh.walk(roots=roots, descending=descending, after=after)

    def next_scheduled(self, type_names):
        return self._fresh.next_scheduled(type_names)


class StaleSnapshotTx(BatchingTx):
    """Bug: job_complete decides which dependents to release on the chains as they were at BEGIN."""

    def __init__(self, adapter, *, read_only):
        super().__init__(adapter, read_only=read_only)
        committed = view_for(self._store, None)
        chain_ids = {*self._store.chains, *self._store.preimages_by_chain}
        self._snapshot = {chain_id: committed.chain_jobs(chain_id) for chain_id in chain_ids}

    async def job_complete(self, params):
        def stale(ctx, now):
            ctx = _writes.Ctx(ctx.store, ctx.tx, StaleView(ctx.view, self._snapshot, ctx.tx))
            return _writes.job_complete(ctx, params, now)

        return await self._write(stale, params.now)


class UnlockedDecisionCtx(_writes.Ctx):
    def lock(self, job_id):
        job = self.view.job(job_id)
        if job is not None and job.status is JobStatus.BLOCKED:
            return  # the bug: the dependent is judged without holding its row
        super().lock(job_id)


class UnlockedDecisionTx(BatchingTx):
    """Bug: job_complete decides which dependents to release without locking them first."""

    async def job_complete(self, params):
        def unlocked(ctx, now):
            return _writes.job_complete(UnlockedDecisionCtx(ctx.store, ctx.tx, ctx.view), params, now)

        return await self._write(unlocked, params.now)


class VariantAdapter(MemoryStateAdapter):
    tx_class = BatchingTx

    @asynccontextmanager
    async def _write_transaction(self):
        # MemoryStateAdapter._write_transaction with the variant's transaction class.
        tx = self.tx_class(self, read_only=False)
        committed = False
        try:
            yield tx
            if tx.poisoned:
                raise TransientStateError("transaction is poisoned; it was rolled back")
            committed = True
        finally:
            tx._end(commit=committed)


def state_suite(tx_class):
    class Variant(VariantAdapter):
        pass

    Variant.tx_class = tx_class

    class Suite(
        ConcurrentUnblockTests,
        JobCompleteUnblockingTests,
        JobsCreateBlockersTests,
        ConcurrencyTests,
        StateSuiteBase,
    ):
        @pytest.fixture
        async def state_adapter(self) -> AsyncIterator[VariantAdapter]:
            adapter = Variant()
            yield adapter
            await adapter.close()

    return Suite


TestCorrectUnblock = state_suite(BatchingTx)
TestStaleSnapshotUnblock = state_suite(StaleSnapshotTx)
TestUnlockedDecisionUnblock = state_suite(UnlockedDecisionTx)
'''

CONCURRENT_CASES = [
    "test_last_two_blockers_completed_in_concurrent_transactions_release_the_dependent_once",
    "test_last_two_blockers_completed_by_concurrent_groups_release_the_dependent_once",
]
ORDERS = ["declared-first-completes-first", "declared-last-completes-first"]
CONTROL = "TestCorrectUnblock"
BROKEN = ["TestStaleSnapshotUnblock", "TestUnlockedDecisionUnblock"]
STRANDED = "after both of its blocker chains completed in concurrent transactions"
"""Part of the suite's failure message when the dependent was left blocked."""

Outcomes = dict[tuple[str, str], set[str]]
Failures = dict[tuple[str, str], str]


class _Recorder:
    """A pytest plugin object collecting every phase report of the inner run."""

    def __init__(self) -> None:
        self.outcomes: Outcomes = {}
        self.failures: Failures = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        _, cls, name = report.nodeid.split("::")
        self.outcomes.setdefault((cls, name), set()).add(report.outcome)
        if report.failed:
            self.failures[(cls, name)] = self.failures.get((cls, name), "") + report.longreprtext


# One worker runs the inner session once (a module fixture runs again on every worker).
pytestmark = pytest.mark.xdist_group("catches_unblock_bugs")


@pytest.fixture(scope="module")
def inner_run(tmp_path_factory: pytest.TempPathFactory) -> _Recorder:
    """Run the composed suites once, in-process, against both variants; (class, case id) → outcomes."""
    root = tmp_path_factory.mktemp("unblock_variants")
    (root / "pytest.ini").write_text(INI)
    (root / "test_unblock_variants.py").write_text(VARIANTS)
    recorder = _Recorder()
    args = [
        "-q",
        "-p",
        "no:cacheprovider",
        "--import-mode=importlib",
        # Native tracebacks: the failure message is all that is read, and pytest's own
        # formatting parses source (CPython 3.11.7 can fail there, see test_suite_catches_bugs).
        "--tb=native",
        f"--rootdir={root}",
        "-c",
        str(root / "pytest.ini"),
    ]
    exit_code = pytest.main([*args, str(root)], plugins=[recorder])
    assert exit_code in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), (
        f"inner run ended with {exit_code!r}"
    )
    return recorder


@pytest.fixture(scope="module")
def outcomes(inner_run: _Recorder) -> Outcomes:
    return inner_run.outcomes


def _outcome(outcomes: Outcomes, cls: str, case: str) -> set[str]:
    assert (cls, case) in outcomes, f"{cls}::{case} did not run; was the case renamed?"
    return outcomes[(cls, case)]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("name", CONCURRENT_CASES)
@pytest.mark.parametrize("variant", BROKEN)
def test_a_broken_variant_fails_the_concurrent_unblock_case_with_its_dependent_stranded(
    inner_run: _Recorder, variant: str, name: str, order: str
) -> None:
    case = f"{name}[{order}]"
    assert "failed" in _outcome(inner_run.outcomes, variant, case), f"the suite let {variant} pass {case}"
    assert STRANDED in inner_run.failures[(variant, case)], inner_run.failures[(variant, case)]
    control = _outcome(inner_run.outcomes, CONTROL, case)
    assert control == {"passed"}, f"{case} does not pass on the correct control: {sorted(control)}"


@pytest.mark.parametrize("variant", BROKEN)
def test_a_broken_variant_passes_every_older_case(outcomes: Outcomes, variant: str) -> None:
    """The blind spot was real: every case but the new ones passes against the broken variant."""
    older = {case for cls, case in outcomes if cls == variant and case.split("[")[0] not in CONCURRENT_CASES}
    assert len(older) > 20, f"too few older cases ran: {sorted(older)}"
    failing = sorted(case for case in older if outcomes[(variant, case)] != {"passed"})
    assert failing == []


def test_the_correct_control_passes_every_case(outcomes: Outcomes) -> None:
    cases = [case for cls, case in outcomes if cls == CONTROL]
    assert sorted(case for case in cases if outcomes[(CONTROL, case)] != {"passed"}) == []
