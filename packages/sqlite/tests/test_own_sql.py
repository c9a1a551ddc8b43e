"""Your own SQL in jobchain's transaction: ``connection_of`` / ``sync_connection_of``.

A handler in atomic mode writes a row of the application's own table on the attempt's
connection: the row commits with the job's completion and rolls back with a failed attempt.
The same holds around ``client.transaction()`` (own or joined: aiosqlite, SQLAlchemy) and in
the synchronous façade (sqlite3). A transaction of another backend gets a typed error.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from sqlalchemy.ext.asyncio import create_async_engine

import jobchain
import jobchain.sync
from jobchain import Client, JobTypes, Transaction
from jobchain.errors import InvalidArgumentError
from jobchain.testing import clocked_state
from jobchain.worker import Attempt, Backoff, Completed, Processors, Worker
from jobchain_sqlite import NotASqliteTransactionError, SqliteStateAdapter, connection_of, sync_connection_of

AT_ONCE = Backoff(initial=timedelta(0), maximum=timedelta(0))
WAIT = 60  # seconds: generous, the machine may be starved


class RollbackError(Exception):
    """Raised to roll a transaction back."""


class App:
    """A client on the test's database file plus the application's own ``orders`` table."""

    def __init__(self, state: SqliteStateAdapter, path: Path) -> None:
        self.types = JobTypes()
        self.ship = self.types.define("ship", input=int, output=str, entry=True)
        self.client = Client(state, None, self.types)
        self.path = path

    def rows(self) -> list[int]:
        with sqlite3.connect(self.path) as connection:
            return [n for (n,) in connection.execute("SELECT n FROM orders ORDER BY n")]


@pytest.fixture
async def app(adapter: SqliteStateAdapter, db_path: Path) -> AsyncIterator[App]:
    with sqlite3.connect(db_path) as connection:
        connection.execute("CREATE TABLE orders (n INTEGER PRIMARY KEY)")
    yield App(adapter, db_path)


# ---------------------------------------------------------------- the attempt's transaction


async def test_a_row_written_in_an_atomic_handler_commits_with_the_completion(app: App) -> None:
    processors = Processors()

    @processors.handler(app.ship)
    async def ship(attempt: Attempt[int, str]) -> Completed:
        await attempt.prepare("atomic")
        await connection_of(attempt).execute("INSERT INTO orders (n) VALUES (?)", (attempt.input,))
        return await attempt.complete(f"shipped {attempt.input}")

    async with app.client.transaction() as tx:
        started = await app.client.start_chain(tx, app.ship, 7)
    async with Worker(app.client, processors, concurrency=1):
        chain = await app.client.await_chain(started.id, timeout=WAIT)
    assert chain.output == "shipped 7"
    assert app.rows() == [7]


async def test_a_row_written_by_a_failing_attempt_rolls_back_with_it(app: App) -> None:
    processors = Processors()

    @processors.handler(app.ship, retry=AT_ONCE)
    async def ship(attempt: Attempt[int, str]) -> Completed:
        await attempt.prepare("atomic")
        tx = attempt.transaction
        await connection_of(tx).execute("INSERT INTO orders (n) VALUES (?)", (attempt.job.attempt,))
        if attempt.job.attempt == 1:
            raise RollbackError("after the insert: the attempt rolls back, the row with it")
        return await attempt.complete("second time lucky")

    async with app.client.transaction() as tx:
        started = await app.client.start_chain(tx, app.ship, 1)
    async with Worker(app.client, processors, concurrency=1):
        chain = await app.client.await_chain(started.id, timeout=WAIT)
    assert chain.last.attempt == 2
    assert app.rows() == [2]  # attempt 1's row rolled back


async def test_a_complete_callback_writes_on_the_same_connection(app: App) -> None:
    processors = Processors()

    @processors.handler(app.ship)
    async def ship(attempt: Attempt[int, str]) -> Completed:
        async def record(tx: Transaction) -> None:
            await connection_of(tx).execute("INSERT INTO orders (n) VALUES (?)", (attempt.input,))

        return await attempt.complete("recorded", callback=record)

    async with app.client.transaction() as tx:
        started = await app.client.start_chain(tx, app.ship, 3)
    async with Worker(app.client, processors, concurrency=1):
        await app.client.await_chain(started.id, timeout=WAIT)
    assert app.rows() == [3]


# ---------------------------------------------------------------- client.transaction()


async def test_a_row_written_in_client_transaction_commits_with_the_chain(app: App) -> None:
    async with app.client.transaction() as tx:
        await connection_of(tx).execute("INSERT INTO orders (n) VALUES (1)")
        started = await app.client.start_chain(tx, app.ship, 1)
    assert await app.client.get_chain(started.id) is not None
    assert app.rows() == [1]


async def test_a_row_written_in_client_transaction_rolls_back_with_the_chain(app: App) -> None:
    started: list[str] = []

    async def order_then_fail() -> None:
        async with app.client.transaction() as tx:
            started.append((await app.client.start_chain(tx, app.ship, 1)).id)
            await connection_of(tx).execute("INSERT INTO orders (n) VALUES (1)")
            raise RollbackError

    with pytest.raises(RollbackError):
        await order_then_fail()
    assert await app.client.get_chain(started[0]) is None
    assert app.rows() == []


async def test_a_joined_aiosqlite_transaction_gives_back_your_connection(app: App) -> None:
    async with aiosqlite.connect(app.path) as mine:
        await mine.execute("BEGIN IMMEDIATE")
        async with app.client.transaction(connection=mine) as tx:
            assert connection_of(tx) is mine
            await app.client.start_chain(tx, app.ship, 1)
        await mine.commit()


async def test_a_joined_sqlalchemy_connection_gives_its_aiosqlite_connection(app: App) -> None:
    engine = create_async_engine(f"sqlite+aiosqlite:///{app.path}")
    try:
        async with engine.begin() as mine:
            async with app.client.transaction(connection=mine) as tx:
                connection = connection_of(tx)
                assert isinstance(connection, aiosqlite.Connection)
                await connection.execute("INSERT INTO orders (n) VALUES (4)")
                await app.client.start_chain(tx, app.ship, 4)
    finally:
        await engine.dispose()
    assert app.rows() == [4]


async def test_a_clocked_state_adapter_still_gives_its_connection(app: App) -> None:
    # jobchain.testing's clock wraps every transaction in a proxy: the accessor sees through it.
    state = clocked_state(app.client.state, lambda: datetime(2030, 1, 1, tzinfo=UTC))
    client = Client(state, None, app.types)
    async with client.transaction() as tx:
        await connection_of(tx).execute("INSERT INTO orders (n) VALUES (9)")
    assert app.rows() == [9]


async def test_an_ended_transaction_gets_a_typed_error(app: App) -> None:
    async with app.client.transaction() as tx:
        pass
    with pytest.raises(NotASqliteTransactionError, match="has ended"):
        connection_of(tx)


# ---------------------------------------------------------------- other backends


async def test_a_memory_transaction_gets_a_typed_error() -> None:
    types = JobTypes()
    async with await jobchain.connect("memory://", notify="none", job_types=types) as client:
        async with client.transaction() as tx:
            with pytest.raises(NotASqliteTransactionError) as caught:
                connection_of(tx)
    assert isinstance(caught.value, InvalidArgumentError)
    assert "memory" in str(caught.value).lower()
    assert "sqlite:///" in str(caught.value)


async def test_a_staged_attempt_without_its_transaction_gets_a_typed_error(app: App) -> None:
    processors = Processors()
    seen: list[BaseException] = []

    @processors.handler(app.ship)
    async def ship(attempt: Attempt[int, str]) -> Completed:
        await attempt.prepare("staged")
        try:
            connection_of(attempt)
        except NotASqliteTransactionError as error:
            seen.append(error)
        return await attempt.complete("done")

    async with app.client.transaction() as tx:
        started = await app.client.start_chain(tx, app.ship, 1)
    async with Worker(app.client, processors, concurrency=1):
        await app.client.await_chain(started.id, timeout=WAIT)
    [error] = seen
    assert 'prepare("atomic")' in str(error)


# ---------------------------------------------------------------- the synchronous façade


def test_a_row_written_in_a_sync_transaction_commits_with_the_chain(app: App) -> None:
    with jobchain.sync.connect(f"sqlite:///{app.path}", notify="none", job_types=app.types) as chains:
        with chains.transaction() as tx:
            connection: sqlite3.Connection = sync_connection_of(tx)
            connection.execute("INSERT INTO orders (n) VALUES (5)")
            started = chains.start_chain(tx, app.ship, 5)
        assert chains.get_chain(started.id) is not None

        def order_then_fail() -> None:
            with chains.transaction() as tx:
                sync_connection_of(tx).execute("INSERT INTO orders (n) VALUES (6)")
                raise RollbackError

        with pytest.raises(RollbackError):
            order_then_fail()
    assert app.rows() == [5]


def test_a_joined_sync_transaction_gives_back_your_connection(app: App) -> None:
    with jobchain.sync.connect(f"sqlite:///{app.path}", notify="none", job_types=app.types) as chains:
        mine = sqlite3.connect(app.path)
        try:
            with chains.transaction(connection=mine) as tx:
                assert sync_connection_of(tx) is mine
                chains.start_chain(tx, app.ship, 1)
            mine.commit()
        finally:
            mine.close()


def test_the_async_accessor_on_a_sync_transaction_names_the_sync_one(app: App) -> None:
    with jobchain.sync.connect(f"sqlite:///{app.path}", notify="none", job_types=app.types) as chains:
        with chains.transaction() as tx:
            with pytest.raises(NotASqliteTransactionError, match="sync_connection_of"):
                connection_of(tx.transaction)


async def test_the_sync_accessor_on_an_async_transaction_names_the_async_one(app: App) -> None:
    async with app.client.transaction() as tx:
        not_sync: Any = tx
        with pytest.raises(NotASqliteTransactionError, match="connection_of"):
            sync_connection_of(not_sync)
