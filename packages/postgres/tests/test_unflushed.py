"""A joined psycopg transaction whose wake-ups are never flushed (Redis notify): one WARNING per
client and the wake-up sent late once jobchain sees the chain committed; flushed: no warning;
rolled back: no warning and nothing sent."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import psycopg
import pytest

import jobchain.joined
from jobchain import Client, JobTypes
from jobchain.url import BackendURL
from jobchain_postgres import PostgresStateAdapter
from jobchain_redis import RedisNotifyAdapter

from .conftest import conninfo

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The test Redis; skips locally, fails under CI=true when it does not answer."""
    url = os.environ.get("JOBCHAIN_TEST_REDIS_URL", "").strip() or DEFAULT_REDIS_URL
    parsed = BackendURL.parse(url)
    try:
        socket.create_connection((parsed.host or "127.0.0.1", parsed.port or 6379), timeout=2).close()
    except OSError as exc:
        reason = f"Redis not reachable at {parsed}: {exc}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason} (CI=true: a missing server is a failure)", pytrace=False)
        pytest.skip(reason)
    return url


@dataclass
class Order:
    n: int


class Inbox:
    """Job-scheduled notifications received for a few type names."""

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
    listener: RedisNotifyAdapter
    inbox: Inbox
    dsn: str

    async def start_order(self, connection: psycopg.AsyncConnection[object]) -> jobchain.Transaction:
        async with self.client.transaction(connection=connection) as tx:
            await self.client.start_chain(tx, "order", Order(n=1))
        return tx

    async def nothing_more(self, times: int) -> None:
        """Exactly ``times`` 'order' wake-ups arrived: a later marker proves no more are coming."""
        await self.listener.publish_job_scheduled("marker")
        await self.inbox.wait_for("marker")
        assert self.inbox.received.count("order") == times


@pytest.fixture
async def setup(
    postgres_url: str, schema_name: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Setup]:
    monkeypatch.setattr(jobchain.joined, "GRACE", 0.05)  # the test commits and never flushes
    prefix = f"jc_unflushed_{uuid.uuid4().hex[:12]}"
    notify_url = f"{redis_url}{'&' if '?' in redis_url else '?'}prefix={prefix}"
    types = JobTypes()
    types.define("order", input=Order, output=None, entry=True)
    state = await PostgresStateAdapter.open(postgres_url + f"?schema={schema_name}")
    await state.migrate()
    notify = await RedisNotifyAdapter.connect(notify_url)
    listener = await RedisNotifyAdapter.connect(notify_url)
    inbox = Inbox()
    await listener.listen_job_scheduled(["order", "marker"], inbox)
    client = Client(state, notify, types)
    yield Setup(client, listener, inbox, conninfo(postgres_url))
    await client.close()
    await listener.close()


def unflushed_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "jobchain.transactions" and r.levelno == logging.WARNING and "never flushed" in r.message
    ]


async def test_committed_and_never_flushed_warns_once_and_wakes_late(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "jobchain.transactions")
    async with await psycopg.AsyncConnection.connect(setup.dsn) as connection:
        await setup.start_order(connection)
        await connection.commit()  # ...and no `await tx.flush()`
        await setup.inbox.wait_for("order")
        [warning] = unflushed_warnings(caplog)
        assert "await tx.flush()" in warning.message
        assert "docs/reference/client.md" in warning.message
        assert "sent them" in warning.message

        await setup.start_order(connection)  # a second forgotten flush: sent, not warned again
        await connection.commit()
        await setup.inbox.wait_for("order", 2)
    await setup.client.close()
    assert len(unflushed_warnings(caplog)) == 1
    await setup.nothing_more(2)


async def test_flushed_after_commit_does_not_warn(setup: Setup, caplog: pytest.LogCaptureFixture) -> None:
    async with await psycopg.AsyncConnection.connect(setup.dsn) as connection:
        tx = await setup.start_order(connection)
        await connection.commit()
        await tx.flush()
        await setup.inbox.wait_for("order")
    await setup.client.close()  # settles anything still watched
    assert unflushed_warnings(caplog) == []
    await setup.nothing_more(1)


async def test_rolled_back_does_not_warn_and_sends_nothing(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    async with await psycopg.AsyncConnection.connect(setup.dsn) as connection:
        await setup.start_order(connection)
        await connection.rollback()
    await setup.client.close()  # settles what the watcher has not: the chain is absent, so dropped
    assert unflushed_warnings(caplog) == []
    await setup.nothing_more(0)


async def test_closing_the_client_while_the_transaction_is_open_warns(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    async with await psycopg.AsyncConnection.connect(setup.dsn) as connection:
        await setup.start_order(connection)
        await setup.client.close()
        [warning] = unflushed_warnings(caplog)
        assert "still open" in warning.message
        await connection.rollback()
    await setup.nothing_more(0)
