"""jobchain.sync on PostgreSQL, through the conformance suites: jobchain's own transactions, and the
caller's psycopg ``Connection`` and SQLAlchemy ``Session``/``Connection`` on ``postgresql+psycopg``.

Plain test functions: no event loop runs in the test's thread.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from jobchain_conformance.suites.sync_facade import SyncFacadeSuite, SyncJoinedSuite
from jobchain_conformance.suites.sync_facade_support import CallerConnection

from .conftest import conninfo

CALLERS = ("psycopg", "sqlalchemy-session", "sqlalchemy-connection")


@pytest.fixture
def pg_sync_url(schema_url: str) -> str:
    return schema_url


class TestSyncFacade(SyncFacadeSuite):
    @pytest.fixture
    def sync_state_url(self, pg_sync_url: str) -> str:
        return pg_sync_url


def caller(kind: str, postgres_url: str) -> Iterator[CallerConnection]:
    """The caller's own connection of ``kind``, inside a transaction (closed afterwards)."""
    if kind == "psycopg":
        with psycopg.connect(conninfo(postgres_url)) as connection:
            yield CallerConnection(connection, connection.commit, connection.rollback, False, kind)
        return
    engine = create_engine(postgres_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        if kind == "sqlalchemy-session":
            with Session(engine) as session:
                yield CallerConnection(session, session.commit, session.rollback, True, kind)
        else:
            with engine.connect() as connection:
                connection.begin()  # jobchain joins a connection already inside a transaction
                yield CallerConnection(connection, connection.commit, connection.rollback, True, kind)
    finally:
        engine.dispose()


class TestSyncJoined(SyncJoinedSuite):
    @pytest.fixture
    def sync_state_url(self, pg_sync_url: str) -> str:
        return pg_sync_url

    @pytest.fixture(params=CALLERS)
    def caller_connection(
        self, request: pytest.FixtureRequest, postgres_url: str
    ) -> Iterator[CallerConnection]:
        yield from caller(request.param, postgres_url)
