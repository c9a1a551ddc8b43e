"""Round trips of a chain start, counted on the wire, and the lazy BEGIN that saves one.

A counting TCP proxy sits between the adapter and the server: every simple ``Query`` and every
``Sync`` (the end of one extended-protocol exchange) is a point where the client waits for the
server, so one round trip. An own transaction sends BEGIN with its first statement: a start in
its own transaction is two round trips (BEGIN with the INSERT, then COMMIT), one in autocommit,
and a transaction that sends nothing costs none. What the lazy BEGIN must not change is checked
here too: your SQL on ``tx.connection`` is in the same transaction, whenever you send it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg.pq import TransactionStatus

from jobchain.contracts import JobGet, JobsCreate, NewJob
from jobchain.entities import new_id
from jobchain.errors import DuplicateJobIdError, TransientStateError
from jobchain_postgres import PostgresStateAdapter, StateOptions

from .conftest import conninfo


class CountingProxy:
    """Forwards one PostgreSQL connection at a time and counts the frontend's messages by type."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.counts: Counter[str] = Counter()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def round_trips(self) -> int:
        return self.counts["Q"] + self.counts["S"]

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        tasks = [
            asyncio.create_task(self._frontend(reader, up_writer)),
            asyncio.create_task(_pipe(up_reader, writer)),
        ]
        self._tasks.update(tasks)
        await asyncio.gather(*tasks, return_exceptions=True)
        for w in (writer, up_writer):
            w.close()

    async def _frontend(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:  # startup packets (SSL/GSS requests, StartupMessage) have no type byte
            head = await reader.readexactly(8)
            body = await reader.readexactly(int.from_bytes(head[:4], "big") - 8)
            writer.write(head + body)
            if int.from_bytes(head[4:8], "big") not in (80877103, 80877104):
                break
        buffer = b""
        while data := await reader.read(65536):
            writer.write(data)
            buffer += data
            while len(buffer) >= 5 and len(buffer) >= 1 + (length := int.from_bytes(buffer[1:5], "big")):
                self.counts[chr(buffer[0])] += 1
                buffer = buffer[1 + length :]
            await writer.drain()
        writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


@pytest.fixture
async def proxied(
    postgres_url: str, schema_name: str
) -> AsyncIterator[tuple[PostgresStateAdapter, CountingProxy]]:
    params = psycopg.conninfo.conninfo_to_dict(conninfo(postgres_url))
    proxy = CountingProxy(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))
    port = await proxy.start()
    info = psycopg.conninfo.make_conninfo(conninfo(postgres_url), host="127.0.0.1", port=port)
    connection = await psycopg.AsyncConnection.connect(info, autocommit=True)
    adapter = PostgresStateAdapter.from_connection(connection, StateOptions(schema=schema_name))
    await adapter.migrate()
    try:
        yield adapter, proxy
    finally:
        await adapter.close()
        await connection.close()
        await proxy.close()


def _root() -> NewJob:
    return NewJob(id=new_id(), type_name="t", chain_type_name="t")


async def _trips(proxy: CountingProxy, runs: int, body: object) -> float:
    """Round trips per run of ``body`` (after warming: psycopg prepares after a few executions)."""
    assert callable(body)
    for _ in range(6):
        await body()
    proxy.counts.clear()
    for _ in range(runs):
        await body()
    await asyncio.sleep(0.05)  # the proxy has counted what was sent
    return proxy.round_trips / runs


async def test_a_start_in_its_own_transaction_is_two_round_trips(
    proxied: tuple[PostgresStateAdapter, CountingProxy],
) -> None:
    adapter, proxy = proxied

    async def start() -> None:
        async with adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[_root()]))

    assert await _trips(proxy, 10, start) == 2  # BEGIN with the INSERT, then COMMIT


async def test_a_batch_in_its_own_transaction_is_two_round_trips(
    proxied: tuple[PostgresStateAdapter, CountingProxy],
) -> None:
    adapter, proxy = proxied

    async def start(size: int) -> None:
        async with adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[_root() for _ in range(size)]))

    assert await _trips(proxy, 5, lambda: start(100)) == 2
    assert await _trips(proxy, 2, lambda: start(1000)) == 2


async def test_a_start_in_autocommit_is_one_round_trip(
    proxied: tuple[PostgresStateAdapter, CountingProxy],
) -> None:
    adapter, proxy = proxied

    async def start() -> None:
        async with adapter.autocommit() as tx:
            await tx.jobs_create(JobsCreate(jobs=[_root()]))

    assert await _trips(proxy, 10, start) == 1


async def test_a_transaction_that_sends_nothing_costs_nothing(
    proxied: tuple[PostgresStateAdapter, CountingProxy],
) -> None:
    adapter, proxy = proxied

    async def nothing() -> None:
        async with adapter.transaction():
            pass

    assert await _trips(proxy, 5, nothing) == 0


async def test_a_later_statement_of_the_transaction_is_one_round_trip(
    proxied: tuple[PostgresStateAdapter, CountingProxy],
) -> None:
    adapter, proxy = proxied
    job = _root()

    async def start_then_read() -> None:
        async with adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[_root()]))
            await tx.job_get(JobGet(job_id=job.id))

    assert await _trips(proxy, 5, start_then_read) == 3


async def test_a_failed_folded_start_rolls_back_and_the_connection_is_reusable(
    pg_state: PostgresStateAdapter,
) -> None:
    job = _root()
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[job]))
    with pytest.raises(DuplicateJobIdError):
        async with pg_state.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[NewJob(id=job.id, type_name="t", chain_type_name="t")]))
    other = _root()
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[other]))
        connection = tx.connection
    assert connection.autocommit, "the pool's connection is handed back in autocommit mode"
    assert connection.info.transaction_status == TransactionStatus.IDLE
    async with pg_state.transaction(read_only=True) as tx:
        assert await tx.job_get(JobGet(job_id=other.id)) is not None


async def _table(postgres_url: str, schema: str) -> str:
    async with await psycopg.AsyncConnection.connect(conninfo(postgres_url), autocommit=True) as conn:
        await conn.execute(f'CREATE TABLE "{schema}".orders (id text primary key)'.encode())
    return f'"{schema}".orders'


async def _count(postgres_url: str, table: str) -> int:
    async with await psycopg.AsyncConnection.connect(conninfo(postgres_url), autocommit=True) as conn:
        cursor = await conn.execute(f"SELECT count(*) FROM {table}".encode())
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("then", ["commit", "raise"])
async def test_your_sql_before_any_jobchain_statement_is_in_the_same_transaction(
    pg_state: PostgresStateAdapter, postgres_url: str, schema_name: str, then: str
) -> None:
    table = await _table(postgres_url, schema_name)
    job = _root()
    with contextlib.suppress(RuntimeError):
        async with pg_state.transaction() as tx:
            await tx.connection.execute(f"INSERT INTO {table} VALUES ('a')".encode())
            assert await _count(postgres_url, table) == 0, "visible before the commit"
            await tx.jobs_create(JobsCreate(jobs=[job]))
            if then == "raise":
                raise RuntimeError("roll back")
    committed = then == "commit"
    assert await _count(postgres_url, table) == (1 if committed else 0)
    async with pg_state.transaction(read_only=True) as tx:
        assert (await tx.job_get(JobGet(job_id=job.id)) is not None) is committed
        assert tx.connection.autocommit


async def test_your_commit_inside_the_transaction_is_refused(pg_state: PostgresStateAdapter) -> None:
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[_root()]))
        with pytest.raises(psycopg.ProgrammingError):
            await tx.connection.commit()


async def test_your_savepoint_after_a_start_is_a_savepoint(
    pg_state: PostgresStateAdapter, postgres_url: str, schema_name: str
) -> None:
    table = await _table(postgres_url, schema_name)
    with contextlib.suppress(RuntimeError):
        async with pg_state.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[_root()]))
            async with tx.connection.transaction():
                await tx.connection.execute(f"INSERT INTO {table} VALUES ('a')".encode())
            raise RuntimeError("roll back")
    assert await _count(postgres_url, table) == 0, "the savepoint's write outlived the rollback"


async def test_a_poisoned_folded_start_fails_the_transaction(pg_state: PostgresStateAdapter) -> None:
    job = _root()
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[job]))
    with pytest.raises(TransientStateError):
        await _swallow_a_duplicate(pg_state, job.id)


async def _swallow_a_duplicate(adapter: PostgresStateAdapter, job_id: str) -> None:
    async with adapter.transaction() as tx:
        with contextlib.suppress(DuplicateJobIdError):
            await tx.jobs_create(JobsCreate(jobs=[NewJob(id=job_id, type_name="t", chain_type_name="t")]))


async def test_your_savepoint_as_the_first_statement_fails_loudly_and_commits_nothing(
    pg_state: PostgresStateAdapter, postgres_url: str, schema_name: str
) -> None:
    """Known limit of the lazy BEGIN: your ``connection.transaction()`` block as the very first
    statement finds no transaction open yet. It must fail and commit nothing, never commit
    half of the transaction (send any statement first, or use ``tx.savepoint()``)."""
    table = await _table(postgres_url, schema_name)
    with pytest.raises(Exception):  # noqa: B017  psycopg's own nesting error
        await _your_block_first(pg_state, table)
    assert await _count(postgres_url, table) == 0, "your block committed part of the transaction"
    async with pg_state.transaction() as tx:  # the connection is usable again
        await tx.jobs_create(JobsCreate(jobs=[_root()]))
        assert tx.connection.info.transaction_status == TransactionStatus.INTRANS


async def _your_block_first(adapter: PostgresStateAdapter, table: str) -> None:
    async with adapter.transaction() as tx:
        async with tx.connection.transaction():
            await tx.connection.execute(f"INSERT INTO {table} VALUES ('a')".encode())
        await tx.jobs_create(JobsCreate(jobs=[_root()]))
