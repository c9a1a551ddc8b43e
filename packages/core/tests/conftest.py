"""Fixtures shared by core's test folders: the PostgreSQL test server and private schemas on it.

PostgreSQL is ``JOBCHAIN_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``);
unreachable, its tests skip with a one-line reason, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

import pytest

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The PostgreSQL test server's URL, after checking that it answers and the adapter is installed."""
    from jobchain.url import BackendURL

    url = os.environ.get("JOBCHAIN_TEST_POSTGRES_URL", "").strip() or DEFAULT_POSTGRES_URL
    parsed = BackendURL.parse(url)
    try:
        with socket.create_connection((parsed.host or "127.0.0.1", parsed.port or 5432), timeout=3):
            pass
        import jobchain_postgres  # noqa: F401 -- the state adapter must be installed
    except (OSError, ImportError) as exc:
        reason = f"PostgreSQL not usable at {parsed.host}:{parsed.port}: {exc}"
        if _in_ci():
            pytest.fail(f"{reason} (CI=true: a missing server is a failure)", pytrace=False)
        pytest.skip(reason)
    return url


@pytest.fixture(scope="session")
def drop_postgres_schema(postgres_server: str) -> Callable[[str], None]:
    """Drops a test's private schema (and everything in it) on the test server."""

    def drop(schema: str) -> None:
        import psycopg
        from psycopg import sql

        from jobchain.url import BackendURL
        from jobchain_postgres.options import target

        with psycopg.connect(target(BackendURL.parse(postgres_server), 5).conninfo, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))

    return drop
