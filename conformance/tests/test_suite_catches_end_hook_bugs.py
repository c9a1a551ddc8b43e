"""The failure and cancel hook cases catch broken adapters: deliberately wrong variants of the
in-process adapter must fail named cases of ``EndHooksTests``, while the correct control passes.

Each variant swaps the reference's hook rule (``_writes.started_by``, the one place every job
write consults) or its registration for the duration of one call, and always puts back the
original saved at import.
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
from contextlib import asynccontextmanager, contextmanager

import pytest

from jobchain.memory import _end_hooks, _writes
from jobchain.memory.state import MemoryStateAdapter
from jobchain_conformance.suites._base import StateSuiteBase
from jobchain_conformance.suites.state_end_hooks import EndHooksTests

REAL_STARTED_BY = _writes.started_by
REAL_REGISTER = _end_hooks.end_hooks_register


@contextmanager
def rule(replacement):
    """The hook rule is ``replacement`` inside the block, the reference's after."""
    _writes.started_by = replacement
    try:
        yield
    finally:
        _writes.started_by = REAL_STARTED_BY


class WrappedTx:
    """Delegates every operation to the memory transaction; variants override some."""

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


class CancelStartsNothingTx(WrappedTx):
    """Bug (a): a cancellation starts no hook (only failures do)."""

    async def chains_cancel(self, params):
        with rule(lambda store, tx, old, new: []):
            return await self._inner.chains_cancel(params)


def _only(job_id):
    def started_by(store, tx, old, new):
        return REAL_STARTED_BY(store, tx, old, new) if new.id == job_id else []

    return started_by


class OnlyTheNamedJobTx(WrappedTx):
    """Bug (b): only the job an operation names starts hooks (propagation and cascades do not)."""

    async def job_fail(self, params):
        with rule(_only(params.job_id)):
            return await self._inner.job_fail(params)

    async def chains_cancel(self, params):
        named = set(params.chain_ids)

        def started_by(store, tx, old, new):
            return REAL_STARTED_BY(store, tx, old, new) if new.chain_id in named else []

        with rule(started_by):
            return await self._inner.chains_cancel(params)


class CreationStartsNothingTx(WrappedTx):
    """Bug (c): a job created failed (its blocker chain had already ended badly) starts no hook."""

    async def jobs_create(self, params):
        with rule(lambda store, tx, old, new: [] if old is None else REAL_STARTED_BY(store, tx, old, new)):
            return await self._inner.jobs_create(params)


def _by_job_type(store, tx, old, new):
    """The chain hooks looked up by the job's type, not its chain's type."""
    return REAL_STARTED_BY(store, tx, old, dataclasses.replace(new, chain_type_name=new.type_name))


class ChainScopeByJobTypeTx(WrappedTx):
    """Bug (d): on_chain_* hooks are looked up by the job's type instead of its chain's type."""

    async def job_fail(self, params):
        with rule(_by_job_type):
            return await self._inner.job_fail(params)


class OncePerJobTx(WrappedTx):
    """Bug (e): a job starts its hook once ever (a retried job failing again starts none)."""

    fired = set()

    async def job_fail(self, params):
        def once(store, tx, old, new):
            started = REAL_STARTED_BY(store, tx, old, new)
            if new.id in OncePerJobTx.fired:
                return []
            if started:
                OncePerJobTx.fired.add(new.id)
            return started

        with rule(once):
            return await self._inner.job_fail(params)


def _merge(store, tx, params):
    """Keep a type's stored hooks where the new row has none (a removed hook keeps firing)."""
    table = store.end_hooks
    rows = []
    for row in params.types:
        old = table.get(tx, row.type_name)
        if old is not None:
            fields = ("on_failed", "on_cancelled", "on_chain_failed", "on_chain_cancelled")
            kept = {f: getattr(row, f) or getattr(old, f) for f in fields}
            row = dataclasses.replace(row, **kept)
        rows.append(row)
    REAL_REGISTER(store, tx, dataclasses.replace(params, types=rows))


class RegisterMergesTx(WrappedTx):
    """Bug (f): registering again merges with the stored hooks instead of replacing them."""

    async def end_hooks_register(self, params):
        _end_hooks.end_hooks_register = _merge
        try:
            return await self._inner.end_hooks_register(params)
        finally:
            _end_hooks.end_hooks_register = REAL_REGISTER


def _priority_zero(store, tx, old, new):
    return [dataclasses.replace(job, priority=0) for job in REAL_STARTED_BY(store, tx, old, new)]


class HookPriorityIgnoredTx(WrappedTx):
    """Bug (g): hook jobs get priority 0, not the hook type's registered priority."""

    async def job_fail(self, params):
        with rule(_priority_zero):
            return await self._inner.job_fail(params)


def end_hooks_suite(tx_class):
    class Variant(WrappedAdapter):
        pass

    Variant.tx_class = tx_class

    class Suite(EndHooksTests, StateSuiteBase):
        @pytest.fixture
        async def state_adapter(self) -> AsyncIterator[WrappedAdapter]:
            adapter = Variant()
            yield adapter
            await adapter.close()

    return Suite


TestCorrect = end_hooks_suite(WrappedTx)
TestCancelStartsNothing = end_hooks_suite(CancelStartsNothingTx)
TestOnlyTheNamedJob = end_hooks_suite(OnlyTheNamedJobTx)
TestCreationStartsNothing = end_hooks_suite(CreationStartsNothingTx)
TestChainScopeByJobType = end_hooks_suite(ChainScopeByJobTypeTx)
TestOncePerJob = end_hooks_suite(OncePerJobTx)
TestRegisterMerges = end_hooks_suite(RegisterMergesTx)
TestHookPriorityIgnored = end_hooks_suite(HookPriorityIgnoredTx)
'''

# variant class → cases that must fail against it (and pass against the correct control).
MUST_FAIL = {
    "TestCancelStartsNothing": [
        "test_a_cancelled_chain_starts_on_cancelled_with_the_reason",
        "test_a_cascading_cancel_starts_the_hooks_of_every_chain_it_cancels",
    ],
    "TestOnlyTheNamedJob": [
        "test_propagation_starts_the_dependents_hooks",
        "test_a_cascading_cancel_starts_the_hooks_of_every_chain_it_cancels",
    ],
    "TestCreationStartsNothing": [
        "test_a_job_created_against_a_failed_blocker_starts_its_hook",
    ],
    "TestChainScopeByJobType": [
        "test_a_chain_hook_fires_for_the_chains_last_job_whatever_its_type",
    ],
    "TestOncePerJob": [
        "test_a_retried_job_that_fails_again_starts_its_hook_again",
    ],
    "TestRegisterMerges": [
        "test_registering_again_replaces_a_types_hooks",
    ],
    "TestHookPriorityIgnored": [
        "test_a_failed_job_starts_its_types_on_failed_hook",
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


pytestmark = [pytest.mark.timeout(600), pytest.mark.xdist_group("catches_end_hook_bugs")]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Outcomes:
    """Run the hook cases once, in-process, against every variant; (class, case) → outcomes."""
    root = tmp_path_factory.mktemp("end_hook_variants")
    (root / "pytest.ini").write_text(INI)
    (root / "test_end_hook_variants.py").write_text(VARIANTS)
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


def test_the_correct_control_passes_every_end_hook_case(outcomes: Outcomes) -> None:
    cases = [case for cls, case in outcomes if cls == CONTROL]
    assert len(cases) >= 12, f"too few hook cases ran: {len(cases)}"
    assert sorted(case for case in cases if "failed" in outcomes[(CONTROL, case)]) == []
