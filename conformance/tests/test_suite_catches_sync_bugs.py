"""The jobchain.sync suite catches broken synchronous wiring: deliberately wrong variants must
fail named cases of ``SyncJoinedSuite``, while the correct wiring passes those same cases.

The variants run on SQLite (stdlib ``sqlite3`` and SQLAlchemy on pysqlite, a temporary file):
joining a caller's transaction needs a real driver connection, which memory:// has none of.

- ``OwnConnection``: a synchronous SQLite adapter that ignores the caller's connection and
  writes in a transaction of its own (committed at the end of the block): the chain exists
  before the caller commits and survives the caller's rollback.
- ``FlushAtBlockExit``: the client sends a joined transaction's wake-ups as the block ends,
  as if it were its own transaction: before the caller's commit, and after a rollback.
- ``FlushAtCommitEvent``: the client sends at an SQLAlchemy ``Connection``'s ``commit`` event
  without waiting for the DBAPI commit that SQLAlchemy runs after it: the wake-up finds nothing.
"""

from __future__ import annotations

import pytest

pytest.importorskip("jobchain_sqlite", reason="the sync variants run on jobchain-sqlite")
pytest.importorskip("sqlalchemy", reason="the sync variants join SQLAlchemy sessions and connections")

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""

BROKEN_WIRING = '''
import sqlite3

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from jobchain.integrations import sqlalchemy_commits
from jobchain.sync import client as sync_client
from jobchain_conformance.suites.sync_facade import SyncJoinedSuite
from jobchain_conformance.suites.sync_facade_support import CallerConnection
from jobchain_sqlite.sync import SyncSqliteStateAdapter

ORIGINAL_OBSERVE = sqlalchemy_commits.observe_sqlalchemy_sync_commit


class OwnConnectionAdapter(SyncSqliteStateAdapter):
    """Bug (a): writes on its own connection instead of joining the caller's."""

    def transaction(self, *, read_only=False, connection=None):
        return super().transaction(read_only=read_only)


def flush_at_block_exit(self, connection, hooks):
    """Bug (b): a joined transaction's wake-ups leave as the block ends."""
    self._deliver(hooks)
    return True


def observe_without_waiting(connection, on_commit, on_rollback):
    """Bug (c): the commit event counts as the finished commit."""
    return ORIGINAL_OBSERVE(connection, lambda finished: on_commit(lambda: True), on_rollback)


def caller(kind, path):
    if kind == "sqlite3":
        connection = sqlite3.connect(path)
        try:
            yield CallerConnection(connection, connection.commit, connection.rollback, False, kind)
        finally:
            connection.close()
        return
    engine = create_engine(f"sqlite:///{path}")
    try:
        if kind == "sqlalchemy-session":
            with Session(engine) as session:
                yield CallerConnection(session, session.commit, session.rollback, True, kind)
        else:
            with engine.connect() as connection:
                connection.begin()
                yield CallerConnection(connection, connection.commit, connection.rollback, True, kind)
    finally:
        engine.dispose()


class Joined(SyncJoinedSuite):
    @pytest.fixture
    def sync_state_url(self, tmp_path):
        return f"sqlite:///{tmp_path / 'jobchain.db'}"

    @pytest.fixture(params=["sqlite3", "sqlalchemy-session", "sqlalchemy-connection"])
    def caller_connection(self, request, tmp_path):
        yield from caller(request.param, tmp_path / "jobchain.db")


class TestCorrect(Joined):
    pass


class TestOwnConnection(Joined):
    """Bug (a): the adapter opens a connection of its own instead of joining the caller's
    transaction, so a started chain commits (or stays) whatever the caller does."""

    @pytest.fixture
    def sync_state(self, tmp_path):
        return OwnConnectionAdapter(str(tmp_path / "jobchain.db"))


class TestFlushAtBlockExit(Joined):
    """Bug (b): notifications are published when the start block exits, before the caller's
    commit (and after its rollback)."""

    @pytest.fixture(autouse=True)
    def _broken(self, monkeypatch):
        monkeypatch.setattr(sync_client.SyncClient, "_watch_commit", flush_at_block_exit)


class TestFlushAtCommitEvent(Joined):
    """Bug (c): the SQLAlchemy commit hook flushes without waiting for the commit to finish."""

    @pytest.fixture(autouse=True)
    def _broken(self, monkeypatch):
        monkeypatch.setattr(sync_client, "observe_sqlalchemy_sync_commit", observe_without_waiting)
'''

CALLERS = ("sqlite3", "sqlalchemy-session", "sqlalchemy-connection")


def _every_caller(*cases: str) -> list[str]:
    return [f"{case}[{kind}]" for case in cases for kind in CALLERS]


# variant class → cases (with their caller parameter) that must fail against it.
MUST_FAIL = {
    "TestOwnConnection": _every_caller(
        "test_a_chain_started_in_the_callers_transaction_appears_with_its_commit",
        "test_the_callers_rollback_leaves_nothing",
        "test_a_batch_with_deduplication_and_blockers_commits_with_the_caller",
    ),
    "TestFlushAtBlockExit": _every_caller(
        "test_nothing_is_published_before_the_callers_commit",
        "test_the_callers_rollback_publishes_nothing",
    ),
    "TestFlushAtCommitEvent": ["test_nothing_is_published_before_the_callers_commit[sqlalchemy-connection]"],
}


class _Recorder:
    """A pytest plugin object collecting every phase report of the inner run."""

    def __init__(self) -> None:
        self.outcomes: dict[tuple[str, str], set[str]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        _, cls, name = report.nodeid.split("::")
        self.outcomes.setdefault((cls, name), set()).add(report.outcome)


# One worker runs the inner session once (a module fixture runs again on every worker).
pytestmark = pytest.mark.xdist_group("catches_sync_bugs")


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], set[str]]:
    """Run the joined sync suite once, in-process, against every variant; (class, case) → outcomes."""
    root = tmp_path_factory.mktemp("sync_variants")
    (root / "pytest.ini").write_text(INI)
    (root / "test_sync_variants.py").write_text(BROKEN_WIRING)
    recorder = _Recorder()
    args = [
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
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


def _failed(outcomes: dict[tuple[str, str], set[str]], cls: str, name: str) -> bool:
    assert (cls, name) in outcomes, f"{cls}::{name} did not run; was the case renamed?"
    return "failed" in outcomes[(cls, name)]


@pytest.mark.parametrize(
    ("variant", "case"), [(variant, case) for variant, cases in MUST_FAIL.items() for case in cases]
)
def test_broken_variant_fails_the_named_case(
    outcomes: dict[tuple[str, str], set[str]], variant: str, case: str
) -> None:
    assert _failed(outcomes, variant, case), f"the suite let {variant} pass {case}"
    assert not _failed(outcomes, "TestCorrect", case), f"{case} fails on the correct wiring too"


def test_the_correct_wiring_passes_the_whole_joined_suite(outcomes: dict[tuple[str, str], set[str]]) -> None:
    ran = {name for cls, name in outcomes if cls == "TestCorrect"}
    assert len(ran) >= 21
    failing = sorted(name for name in ran if "failed" in outcomes[("TestCorrect", name)])
    skipped = sorted(name for name in ran if "skipped" in outcomes[("TestCorrect", name)])
    assert failing == []
    assert skipped == []


def test_flushing_at_the_commit_event_passes_where_sqlalchemy_reports_after_the_commit(
    outcomes: dict[tuple[str, str], set[str]],
) -> None:
    # A Session's after_commit follows its database commit: only the Connection case can tell.
    case = "test_nothing_is_published_before_the_callers_commit[sqlalchemy-session]"
    assert not _failed(outcomes, "TestFlushAtCommitEvent", case)
