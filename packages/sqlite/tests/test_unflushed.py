"""A joined aiosqlite transaction whose wake-ups are never flushed (memory:// notify): one WARNING
per client and the wake-up sent late once jobchain sees the chain committed; flushed: no
warning; rolled back: no warning and nothing sent."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiosqlite
import pytest

import jobchain.joined
from jobchain import Client, JobTypes, Transaction
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain_sqlite import SqliteStateAdapter


class Inbox:
    """Job-scheduled notifications received, by type name."""

    def __init__(self) -> None:
        self.received: list[str] = []
        self.changed = asyncio.Event()

    def __call__(self, name: str) -> None:
        self.received.append(name)
        self.changed.set()

    async def wait_for(self, name: str, count: int = 1) -> None:
        async with asyncio.timeout(30):  # generous: a loaded machine; the watcher polls every 0.25 s
            while self.received.count(name) < count:
                self.changed.clear()
                await self.changed.wait()


@dataclass
class Setup:
    client: Client
    notify: MemoryNotifyAdapter
    inbox: Inbox
    db_path: Path

    async def start_ship(self, connection: aiosqlite.Connection) -> Transaction:
        async with self.client.transaction(connection=connection) as tx:
            await self.client.start_chain(tx, "ship", 1)
        return tx


@pytest.fixture
async def setup(
    adapter: SqliteStateAdapter, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Setup]:
    monkeypatch.setattr(jobchain.joined, "GRACE", 0.05)  # the tests commit and never flush
    notify = MemoryNotifyAdapter()
    inbox = Inbox()
    await notify.listen_job_scheduled(["ship"], inbox)
    types = JobTypes()
    types.define("ship", input=int, output=None, entry=True)
    client = Client(adapter, notify, types)
    yield Setup(client, notify, inbox, db_path)
    await client.close()


def unflushed_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "jobchain.transactions" and r.levelno == logging.WARNING and "never flushed" in r.message
    ]


async def test_committed_and_never_flushed_warns_once_and_wakes_late(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    async with aiosqlite.connect(setup.db_path) as connection:
        await setup.start_ship(connection)
        await connection.commit()  # ...and no `await tx.flush()`
        await setup.inbox.wait_for("ship")
        [warning] = unflushed_warnings(caplog)
        assert "await tx.flush()" in warning.message
        await setup.start_ship(connection)
        await connection.commit()
        await setup.inbox.wait_for("ship", 2)
    await setup.client.close()
    assert len(unflushed_warnings(caplog)) == 1
    assert setup.inbox.received.count("ship") == 2


async def test_flushed_after_commit_does_not_warn(setup: Setup, caplog: pytest.LogCaptureFixture) -> None:
    async with aiosqlite.connect(setup.db_path) as connection:
        tx = await setup.start_ship(connection)
        await connection.commit()
        await tx.flush()
    await setup.client.close()  # settles anything still watched
    assert unflushed_warnings(caplog) == []
    assert setup.inbox.received == ["ship"]


async def test_rolled_back_does_not_warn_and_sends_nothing(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    async with aiosqlite.connect(setup.db_path) as connection:
        await setup.start_ship(connection)
        await connection.rollback()
    await setup.client.close()  # settles what the watcher has not: the chain is absent, so dropped
    assert unflushed_warnings(caplog) == []
    assert setup.inbox.received == []


async def test_without_notify_nothing_is_watched(
    adapter: SqliteStateAdapter, db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    types = JobTypes()
    types.define("ship", input=int, output=None, entry=True)
    client = Client(adapter, None, types)
    async with aiosqlite.connect(db_path) as connection:
        async with client.transaction(connection=connection) as tx:
            await client.start_chain(tx, "ship", 1)
        await connection.commit()
    await client.close()
    assert unflushed_warnings(caplog) == []
