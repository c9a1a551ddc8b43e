"""Fixtures of the admin CLI tests: a seeded jobchain database on SQLite (a file) and on
PostgreSQL (a private schema, dropped afterwards).

PostgreSQL is ``JOBCHAIN_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``);
unreachable, its tests skip with a one-line reason, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .shop import Shop, seed_shop

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


def _drop_schema(server: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    from jobchain.url import BackendURL
    from jobchain_postgres.options import target

    with psycopg.connect(target(BackendURL.parse(server), 5).conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture(params=["sqlite", "postgres"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty jobchain database of this test alone, on each backend."""
    from jobchain.connect_backends import open_state

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
        schema = None
    else:
        server = request.getfixturevalue("postgres_server")
        schema = f"jc_cli_{uuid.uuid4().hex[:12]}"
        url = f"{server}{'&' if '?' in server else '?'}schema={schema}"

    async def migrate() -> None:
        adapter = await open_state(url)
        try:
            await adapter.migrate()
        finally:
            await adapter.close()

    asyncio.run(migrate())
    yield url
    if schema is not None:
        _drop_schema(request.getfixturevalue("postgres_server"), schema)


@pytest.fixture
def shop(empty_url: str) -> Shop:
    """The seeded shop (see ``shop.py``) on each backend."""
    return asyncio.run(seed_shop(empty_url))
