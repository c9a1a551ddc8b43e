"""The session revocation cases catch broken adapters: deliberately wrong variants of the
in-process adapter must fail named cases of ``SessionRevocationTests`` (issue 34, finding 10),
while the correct control passes them all.

Each variant wraps the memory adapter's transaction and rewrites the parameters, skips the
write, or writes through its own operation; only the session cases run against the variants,
which keeps this run short.
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
from datetime import UTC, datetime

import pytest

from jobchain.contracts import session_key
from jobchain.memory.state import MemoryStateAdapter
from jobchain_conformance.suites._base import StateSuiteBase
from jobchain_conformance.suites.state_sessions import SessionRevocationTests

EPOCH = datetime(1, 1, 1, tzinfo=UTC)


class WrappedTx:
    """Delegates every operation to the memory transaction; variants override one."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    async def sessions_revoke(self, params):
        return await self._inner.sessions_revoke(params)

    async def session_revoked(self, params):
        return await self._inner.session_revoked(params)


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


class ForgetsRevocationsTx(WrappedTx):
    """Bug (a): sessions_revoke stores nothing: a logged-out cookie stays valid."""

    async def sessions_revoke(self, params):
        return None


class IgnoresExpiryTx(WrappedTx):
    """Bug (b): session_revoked ignores the expiry: a revocation holds forever."""

    async def session_revoked(self, params):
        return await self._inner.session_revoked(dataclasses.replace(params, now=EPOCH))


class NeverPrunesTx(WrappedTx):
    """Bug (c): sessions_revoke never deletes expired revocations (the table only grows)."""

    async def sessions_revoke(self, params):
        return await self._inner.sessions_revoke(dataclasses.replace(params, now=EPOCH))


class LastExpiryWinsTx(WrappedTx):
    """Bug (d): revoking again overwrites the expiry with a shorter one."""

    async def sessions_revoke(self, params):
        def op(ctx, now):
            table, key = ctx.store.sessions, session_key(params.session_id)
            ctx.store.lock_table(ctx.tx, table, key)
            table.put(ctx.tx, key, params.expires_at)

        await self._inner._write(op, params.now)


class SurvivesRollbackTx(WrappedTx):
    """Bug (e): the revocation commits on its own, outside the caller's transaction."""

    async def sessions_revoke(self, params):
        async with self._inner._adapter.transaction() as own:
            await own.sessions_revoke(params)


class FoldsCaseTx(WrappedTx):
    """Bug (f): session ids are compared without case and surrounding blanks, so revoking one
    session revokes others."""

    def _folded(self, params):
        return dataclasses.replace(params, session_id=params.session_id.strip().lower())

    async def sessions_revoke(self, params):
        return await self._inner.sessions_revoke(self._folded(params))

    async def session_revoked(self, params):
        return await self._inner.session_revoked(self._folded(params))


def sessions_suite(tx_class):
    class Variant(WrappedAdapter):
        pass

    Variant.tx_class = tx_class

    class Suite(SessionRevocationTests, StateSuiteBase):
        @pytest.fixture
        async def state_adapter(self) -> AsyncIterator[WrappedAdapter]:
            adapter = Variant()
            yield adapter
            await adapter.close()

    return Suite


TestCorrect = sessions_suite(WrappedTx)
TestForgetsRevocations = sessions_suite(ForgetsRevocationsTx)
TestIgnoresExpiry = sessions_suite(IgnoresExpiryTx)
TestNeverPrunes = sessions_suite(NeverPrunesTx)
TestLastExpiryWins = sessions_suite(LastExpiryWinsTx)
TestSurvivesRollback = sessions_suite(SurvivesRollbackTx)
TestFoldsCase = sessions_suite(FoldsCaseTx)
'''

# variant class → cases that must fail against it (and pass against the correct control).
MUST_FAIL = {
    "TestForgetsRevocations": [
        "test_a_revoked_session_reads_as_revoked",
        "test_the_next_revoke_deletes_expired_revocations",
        "test_revoking_again_keeps_the_later_expiry",
        "test_a_revocation_is_seen_by_a_later_transaction_only_once_committed",
        "test_many_sessions_are_revoked_independently",
    ],
    "TestIgnoresExpiry": [
        "test_a_revocation_ends_at_its_expiry",
        "test_revoking_again_keeps_the_later_expiry",
        "test_many_sessions_are_revoked_independently",
    ],
    "TestNeverPrunes": [
        "test_the_next_revoke_deletes_expired_revocations",
        "test_a_revocation_expiring_exactly_now_is_deleted",
    ],
    "TestLastExpiryWins": [
        "test_revoking_again_keeps_the_later_expiry",
    ],
    "TestSurvivesRollback": [
        "test_a_revocation_rolled_back_never_happened",
    ],
    "TestFoldsCase": [
        "test_another_session_is_not_revoked",
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
pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("catches_session_bugs")]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Outcomes:
    """Run the session cases once, in-process, against every variant; (class, case) → outcomes."""
    root = tmp_path_factory.mktemp("session_variants")
    (root / "pytest.ini").write_text(INI)
    (root / "test_session_variants.py").write_text(VARIANTS)
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


def test_the_correct_control_passes_every_session_case(outcomes: Outcomes) -> None:
    cases = [case for cls, case in outcomes if cls == CONTROL]
    assert len(cases) >= 10, f"too few session cases ran: {len(cases)}"
    assert sorted(case for case in cases if "failed" in outcomes[(CONTROL, case)]) == []
    skipped = sorted(case for case in cases if "skipped" in outcomes[(CONTROL, case)])
    assert skipped == [], f"the correct control skipped {skipped}"
