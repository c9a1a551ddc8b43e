"""Your own SQL in jobchain's transaction: ``connection_of`` / ``sync_connection_of``.

A handler in atomic mode writes a row of the application's own table on the attempt's
connection: the row commits with the job's completion and rolls back with a failed attempt.
The same holds around ``client.transaction()`` and in the synchronous façade. A transaction
of another backend gets a typed error that says what to pass instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

import jobchain
import jobchain.sync
from jobchain import Client, JobTypes, Transaction
from jobchain.errors import InvalidArgumentError
from jobchain.worker import Attempt, Backoff, Completed, Processors, Worker
from jobchain_postgres import (
    NotAPostgresTransactionError,
    PostgresStateAdapter,
    connection_of,
    sync_connection_of,
)

from .conftest import conninfo

pytestmark = pytest.mark.pg_connections(6)  # the adapter's pool, a worker's claims, checks

AT_ONCE = Backoff(initial=timedelta(0), maximum=timedelta(0))
WAIT = 60  # seconds: generous, the machine may be starved


class RollbackError(Exception):
    """Raised to roll a transaction back."""


class App:
    """A client on this test's schema plus the application's own ``orders`` table there."""

    def __init__(self, state: PostgresStateAdapter, dsn: str) -> None:
        self.types = JobTypes()
        self.ship = self.types.define("ship", input=int, output=str, entry=True)
        self.client = Client(state, None, self.types)
        self.dsn = dsn
        self.orders = sql.Identifier(state.options.schema, "orders")

    def insert(self, n: int) -> sql.Composed:
        return sql.SQL("INSERT INTO {} (n) VALUES ({})").format(self.orders, sql.Literal(n))

    async def rows(self) -> list[int]:
        async with await psycopg.AsyncConnection.connect(self.dsn) as connection:
            cursor = await connection.execute(sql.SQL("SELECT n FROM {} ORDER BY n").format(self.orders))
            return [row[0] for row in await cursor.fetchall()]


@pytest.fixture
async def app(postgres_url: str, pg_state: PostgresStateAdapter) -> AsyncIterator[App]:
    app = App(pg_state, conninfo(postgres_url))
    with psycopg.connect(app.dsn, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE TABLE {} (n integer PRIMARY KEY)").format(app.orders))
    yield app


# ---------------------------------------------------------------- the attempt's transaction


async def test_a_row_written_in_an_atomic_handler_commits_with_the_completion(app: App) -> None:
    processors = Processors()

    @processors.handler(app.ship)
    async def ship(attempt: Attempt[int, str]) -> Completed:
        await attempt.prepare("atomic")
        await connection_of(attempt).execute(app.insert(attempt.input))
        return await attempt.complete(f"shipped {attempt.input}")

    async with app.client.transaction() as tx:
        started = await app.client.start_chain(tx, app.ship, 7)
    async with Worker(app.client, processors, concurrency=1):
        chain = await app.client.await_chain(started.id, timeout=WAIT)
    assert chain.output == "shipped 7"
    assert await app.rows() == [7]


async def test_a_row_written_by_a_failing_attempt_rolls_back_with_it(app: App) -> None:
    processors = Processors()

    @processors.handler(app.ship, retry=AT_ONCE)
    async def ship(attempt: Attempt[int, str]) -> Completed:
        await attempt.prepare("atomic")
        tx = attempt.transaction  # the same connection, passed as the Transaction itself
        await connection_of(tx).execute(app.insert(attempt.job.attempt))
        if attempt.job.attempt == 1:
            raise RollbackError("after the insert: the attempt rolls back, the row with it")
        return await attempt.complete("second time lucky")

    async with app.client.transaction() as tx:
        started = await app.client.start_chain(tx, app.ship, 1)
    async with Worker(app.client, processors, concurrency=1):
        chain = await app.client.await_chain(started.id, timeout=WAIT)
    assert chain.last.attempt == 2
    assert await app.rows() == [2]  # attempt 1's row rolled back


async def test_a_complete_callback_writes_on_the_same_connection(app: App) -> None:
    processors = Processors()

    @processors.handler(app.ship)
    async def ship(attempt: Attempt[int, str]) -> Completed:
        async def record(tx: Transaction) -> None:
            await connection_of(tx).execute(app.insert(attempt.input))

        return await attempt.complete("recorded", callback=record)

    async with app.client.transaction() as tx:
        started = await app.client.start_chain(tx, app.ship, 3)
    async with Worker(app.client, processors, concurrency=1):
        await app.client.await_chain(started.id, timeout=WAIT)
    assert await app.rows() == [3]


async def test_a_staged_attempt_between_its_phases_gets_a_typed_error(app: App) -> None:
    processors = Processors()
    seen: list[BaseException] = []

    @processors.handler(app.ship)
    async def ship(attempt: Attempt[int, str]) -> Completed:
        await attempt.prepare("staged")
        try:
            connection_of(attempt)
        except NotAPostgresTransactionError as error:
            seen.append(error)
        return await attempt.complete("done")

    async with app.client.transaction() as tx:
        started = await app.client.start_chain(tx, app.ship, 1)
    async with Worker(app.client, processors, concurrency=1):
        await app.client.await_chain(started.id, timeout=WAIT)
    [error] = seen
    assert isinstance(error, InvalidArgumentError)
    assert 'prepare("atomic")' in str(error)


# ---------------------------------------------------------------- client.transaction()


async def test_a_row_written_in_client_transaction_commits_with_the_chain(app: App) -> None:
    async with app.client.transaction() as tx:
        await connection_of(tx).execute(app.insert(1))
        started = await app.client.start_chain(tx, app.ship, 1)
    assert await app.client.get_chain(started.id) is not None
    assert await app.rows() == [1]


async def test_a_row_written_in_client_transaction_rolls_back_with_the_chain(app: App) -> None:
    started: list[str] = []

    async def order_then_fail() -> None:
        async with app.client.transaction() as tx:
            started.append((await app.client.start_chain(tx, app.ship, 1)).id)
            await connection_of(tx).execute(app.insert(1))
            raise RollbackError

    with pytest.raises(RollbackError):
        await order_then_fail()
    assert await app.client.get_chain(started[0]) is None
    assert await app.rows() == []


async def test_a_savepoint_rolls_back_only_its_own_rows(app: App) -> None:
    async with app.client.transaction() as tx:
        await connection_of(tx).execute(app.insert(1))

        async def fail_inside() -> None:
            async with tx.savepoint() as inner:
                await connection_of(inner).execute(app.insert(2))
                raise RollbackError

        with pytest.raises(RollbackError):
            await fail_inside()
    assert await app.rows() == [1]


async def test_an_ended_transaction_gets_a_typed_error(app: App) -> None:
    async with app.client.transaction() as tx:
        pass
    with pytest.raises(NotAPostgresTransactionError, match="has ended"):
        connection_of(tx)


# ---------------------------------------------------------------- other backends


async def test_a_memory_transaction_gets_a_typed_error() -> None:
    types = JobTypes()
    async with await jobchain.connect("memory://", notify="none", job_types=types) as client:
        async with client.transaction() as tx:
            with pytest.raises(NotAPostgresTransactionError) as caught:
                connection_of(tx)
    assert isinstance(caught.value, InvalidArgumentError)
    assert "memory" in str(caught.value).lower()
    assert "postgresql://" in str(caught.value)


async def test_something_else_gets_a_typed_error() -> None:
    not_a_tx: Any = object()
    with pytest.raises(NotAPostgresTransactionError, match="got object"):
        connection_of(not_a_tx)


# ---------------------------------------------------------------- the synchronous façade


def test_a_row_written_in_a_sync_transaction_commits_with_the_chain(schema_url: str, app: App) -> None:
    with jobchain.sync.connect(schema_url, notify="none", job_types=app.types) as chains:
        with chains.transaction() as tx:
            connection: psycopg.Connection[Any] = sync_connection_of(tx)
            connection.execute(app.insert(5))
            started = chains.start_chain(tx, app.ship, 5)
        assert chains.get_chain(started.id) is not None

        def order_then_fail() -> None:
            with chains.transaction() as tx:
                sync_connection_of(tx).execute(app.insert(6))
                raise RollbackError

        with pytest.raises(RollbackError):
            order_then_fail()
    with psycopg.connect(app.dsn) as check:
        rows = check.execute(sql.SQL("SELECT n FROM {}").format(app.orders)).fetchall()
    assert rows == [(5,)]


def test_a_joined_sync_transaction_gives_back_your_connection(schema_url: str, app: App) -> None:
    with jobchain.sync.connect(schema_url, notify="none", job_types=app.types) as chains:
        with psycopg.connect(app.dsn) as mine:
            with chains.transaction(connection=mine) as tx:
                assert sync_connection_of(tx) is mine
                chains.start_chain(tx, app.ship, 1)


def test_the_async_accessor_on_a_sync_transaction_names_the_sync_one(schema_url: str, app: App) -> None:
    with jobchain.sync.connect(schema_url, notify="none", job_types=app.types) as chains:
        with chains.transaction() as tx:
            with pytest.raises(NotAPostgresTransactionError, match="sync_connection_of"):
                connection_of(tx.transaction)


async def test_the_sync_accessor_on_an_async_transaction_names_the_async_one(app: App) -> None:
    async with app.client.transaction() as tx:
        not_sync: Any = tx
        with pytest.raises(NotAPostgresTransactionError, match="connection_of"):
            sync_connection_of(not_sync)
