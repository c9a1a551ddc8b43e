"""Fixtures of the admin CLI tests: a seeded jobchain database on SQLite (a file) and on
PostgreSQL (a private schema, dropped afterwards).

The PostgreSQL server and its schema clean-up come from ``packages/core/tests/conftest.py``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .shop import Shop, seed_shop


@pytest.fixture(params=["sqlite", "postgres"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty jobchain database of this test alone, on each backend."""
    from jobchain.connect_backends import open_state

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
        schema = None
    else:
        server = request.getfixturevalue("postgres_server")
        drop = request.getfixturevalue("drop_postgres_schema")  # not during teardown: deprecated
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
        drop(schema)


@pytest.fixture
def shop(empty_url: str) -> Shop:
    """The seeded shop (see ``shop.py``) on each backend."""
    return asyncio.run(seed_shop(empty_url))
