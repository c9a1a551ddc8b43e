"""Client.transaction(connection=...) on SQLAlchemy: notifications leave only after the caller commits."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine

from jobchain import Client, JobTypes
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain_sqlite import SqliteStateAdapter


@dataclass
class Ship:
    order: int


types = JobTypes()
ship = types.define("ship", input=Ship, output=None, entry=True)


@pytest.fixture
async def engine(db_path: Path, adapter: SqliteStateAdapter) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(f"sqlite+aiosqlite:///{db_path}")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE orders (id INTEGER PRIMARY KEY)"))
    yield engine
    await engine.dispose()


@pytest.fixture
async def scheduled(adapter: SqliteStateAdapter) -> AsyncIterator[tuple[Client, list[str]]]:
    notify = MemoryNotifyAdapter()
    heard: list[str] = []
    unsubscribe = await notify.listen_job_scheduled(["ship"], heard.append)
    client = Client(adapter, notify, types)
    yield client, heard
    await unsubscribe()
    await notify.close()


async def settle() -> None:
    for _ in range(5):  # let the after-commit flush task run
        await asyncio.sleep(0)


@pytest.mark.parametrize("kind", ["session", "connection"])
async def test_notification_leaves_after_the_callers_commit_not_before(
    engine: AsyncEngine, scheduled: tuple[Client, list[str]], kind: str
) -> None:
    client, heard = scheduled
    if kind == "session":
        async with AsyncSession(engine) as session, session.begin():
            await session.execute(text("INSERT INTO orders (id) VALUES (1)"))
            async with client.transaction(connection=session) as tx:
                started = await client.start_chain(tx, ship, Ship(order=1))
            await settle()
            assert heard == []
    else:
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO orders (id) VALUES (1)"))
            async with client.transaction(connection=conn) as tx:
                started = await client.start_chain(tx, ship, Ship(order=1))
            await settle()
            assert heard == []
    await settle()
    assert heard == ["ship"]
    assert await client.get_chain(started.id) is not None


async def test_a_rolled_back_session_sends_nothing_and_leaves_no_chain(
    engine: AsyncEngine, scheduled: tuple[Client, list[str]]
) -> None:
    client, heard = scheduled
    async with AsyncSession(engine) as session:
        async with session.begin():
            async with client.transaction(connection=session) as tx:
                started = await client.start_chain(tx, ship, Ship(order=2))
            await session.rollback()
    await settle()
    assert heard == []
    assert await client.get_chain(started.id) is None
