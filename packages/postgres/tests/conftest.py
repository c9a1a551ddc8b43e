"""Fixtures of the PostgreSQL tests: a real server, and a fresh schema per test (dropped after).

The server is ``JOBCHAIN_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``).
If it cannot be reached the tests skip with a one-line reason, except under ``CI=true``, where
they fail: CI must never pass by skipping.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlencode

import psycopg
import pytest
from psycopg import sql

from jobchain.url import BackendURL
from jobchain_postgres import NotifyOptions, PostgresNotifyAdapter, PostgresStateAdapter, StateOptions
from jobchain_postgres.options import Claim, target

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def server_url() -> str:
    return os.environ.get("JOBCHAIN_TEST_POSTGRES_URL", DEFAULT_URL)


def conninfo(url: str) -> str:
    return target(BackendURL.parse(url), 5).conninfo


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The test server's URL, after checking that it answers."""
    url = server_url()
    try:
        psycopg.connect(conninfo(url), connect_timeout=3).close()
    except psycopg.Error as exc:
        reason = f"PostgreSQL not reachable at {BackendURL.parse(url)}: {str(exc).strip().splitlines()[0]}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason} (CI=true: a missing server is a failure)", pytrace=False)
        pytest.skip(reason)
    return url


@pytest.fixture
def schema_name(postgres_url: str) -> Iterator[str]:
    """A fresh schema name for this test; the schema (if created) is dropped afterwards."""
    name = f"jc_{uuid.uuid4().hex[:16]}"
    yield name
    with psycopg.connect(conninfo(postgres_url), autocommit=True) as connection:
        connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def with_query(url: str, **query: str) -> str:
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}{urlencode(query)}"


@pytest.fixture
def schema_url(postgres_url: str, schema_name: str) -> str:
    """The server URL selecting this test's schema."""
    return with_query(postgres_url, schema=schema_name)


async def open_state(url: str, schema: str, claim: Claim = "skip-locked") -> PostgresStateAdapter:
    adapter = await PostgresStateAdapter.open(url, StateOptions(schema=schema, claim=claim, pool_min_size=0))
    await adapter.migrate()
    return adapter


@pytest.fixture
async def pg_state(postgres_url: str, schema_name: str) -> AsyncIterator[PostgresStateAdapter]:
    """A migrated state adapter (default claim mode) on this test's schema."""
    adapter = await open_state(postgres_url, schema_name)
    yield adapter
    await adapter.close()


@pytest.fixture
def channel_prefix() -> str:
    return f"jc_{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def pg_notify(postgres_url: str, channel_prefix: str) -> AsyncIterator[PostgresNotifyAdapter]:
    """A notify adapter on channels no other test uses."""
    adapter = await PostgresNotifyAdapter.open(postgres_url, NotifyOptions(channel_prefix=channel_prefix))
    yield adapter
    await adapter.close()


def notify_backend_pids(adapter: PostgresNotifyAdapter) -> list[int]:
    """Server process ids of the adapter's LISTEN and publishing connections (those open now)."""
    pids = [adapter.listen_backend_pid]
    publisher = adapter._publisher  # no public pid: the publishing connection opens lazily
    if publisher is not None and not publisher.closed:
        pids.append(publisher.info.backend_pid)
    return [pid for pid in pids if pid is not None]


async def terminate_backends(url: str, pids: list[int]) -> None:
    """``pg_terminate_backend`` each pid and wait (up to 30 s) until it is gone: the server side
    of a connection breaks, as when an administrator or a failover kills it."""
    async with await psycopg.AsyncConnection.connect(conninfo(url), autocommit=True) as connection:
        await connection.execute(
            "SELECT pg_terminate_backend(pid, 30000) FROM unnest(%s::int[]) AS pid", [pids]
        )
