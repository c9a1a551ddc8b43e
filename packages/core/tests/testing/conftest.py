"""Tests of jobchain.testing: run_until_idle and the clock on every backend, and the pytest plugin.

PostgreSQL is ``JOBCHAIN_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``),
in a fresh schema dropped afterwards; unreachable, its cases skip, except under ``CI=true``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

import jobchain
from jobchain import Client, JobTypes
from jobchain.testing import FrozenClock, memory_client


def pytest_configure(config: pytest.Config) -> None:
    # ``pytest_plugins = ["pytester"]`` is only allowed in the rootdir's conftest.
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")


# Later than the real time, so nothing a backend stamps with its own clock is in the future.
START = datetime(2031, 5, 6, 12, 1, 0, tzinfo=UTC)

Connect = Callable[[JobTypes], Awaitable[Client]]


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(START)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
async def connect(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FrozenClock
) -> AsyncIterator[Connect]:
    """Opens a client with the test's registry and the clock on the parametrized backend."""
    clients: list[Client] = []
    url: str | None = None
    schema: str | None = None
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
    elif request.param == "postgresql":
        server = request.getfixturevalue("postgres_server")
        drop = request.getfixturevalue("drop_postgres_schema")  # not during teardown: deprecated
        schema = f"jc_testing_{uuid.uuid4().hex[:12]}"
        url = f"{server}{'&' if '?' in server else '?'}schema={schema}"

    async def open_client(job_types: JobTypes) -> Client:
        if url is None:
            client = memory_client(job_types, clock=clock)
        else:
            client = await jobchain.connect(
                url, notify="none", job_types=job_types, clock=clock, migrate=True
            )
        clients.append(client)
        return client

    yield open_client
    for client in clients:
        await client.close()
    if schema is not None:
        drop(schema)
