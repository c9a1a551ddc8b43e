"""jobchain.sync on SQLite, through the conformance suites: jobchain's own transactions, and the
caller's ``sqlite3.Connection`` and SQLAlchemy ``Session``/``Connection`` on ``sqlite``.

Plain test functions: no event loop runs in the test's thread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from jobchain_conformance.suites.sync_facade import SyncFacadeSuite, SyncJoinedSuite
from jobchain_conformance.suites.sync_facade_support import CallerConnection

CALLERS = ("sqlite3", "sqlalchemy-session", "sqlalchemy-connection")


def caller(kind: str, path: Path) -> Iterator[CallerConnection]:
    """The caller's own connection of ``kind`` on the database file (closed afterwards)."""
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
            with engine.connect() as joined:
                joined.begin()  # jobchain joins a connection already inside a transaction
                yield CallerConnection(joined, joined.commit, joined.rollback, True, kind)
    finally:
        engine.dispose()


class TestSyncFacade(SyncFacadeSuite):
    @pytest.fixture
    def sync_state_url(self, db_path: Path) -> str:
        return f"sqlite:///{db_path}"


class TestSyncJoined(SyncJoinedSuite):
    @pytest.fixture
    def sync_state_url(self, db_path: Path) -> str:
        return f"sqlite:///{db_path}"

    @pytest.fixture(params=CALLERS)
    def caller_connection(self, request: pytest.FixtureRequest, db_path: Path) -> Iterator[CallerConnection]:
        yield from caller(request.param, db_path)
