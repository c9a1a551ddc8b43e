"""Transactional enqueue: a chain started inside the caller's own psycopg or SQLAlchemy transaction
exists exactly when that transaction commits, and notifies exactly once, after the commit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine

from jobchain import ChainStart, Client, JobTypes
from jobchain.contracts import JobsList
from jobchain.transactions import Transaction
from jobchain_postgres import NotifyOptions, PostgresNotifyAdapter, PostgresStateAdapter

from .conftest import conninfo

pytestmark = pytest.mark.pg_connections(6)  # an engine or pool, the adapters, a check: 4-5 measured


@dataclass
class Order:
    n: int


class Inbox:
    """Records job-scheduled notifications for one type."""

    def __init__(self) -> None:
        self.received: list[str] = []
        self.changed = asyncio.Event()

    def __call__(self, name: str) -> None:
        self.received.append(name)
        self.changed.set()

    async def wait_for(self, name: str, count: int = 1) -> None:
        async with asyncio.timeout(5):
            while self.received.count(name) < count:
                self.changed.clear()
                await self.changed.wait()


class Setup:
    def __init__(self, client: Client, state: PostgresStateAdapter, notify: PostgresNotifyAdapter, dsn: str):
        self.client = client
        self.state = state
        self.notify = notify
        self.dsn = dsn
        self.schema = state.options.schema
        self.orders = sql.Identifier(self.schema, "orders")
        self.types = client.job_types
        self.inbox = Inbox()

    async def listen(self) -> None:
        await self.notify.listen_job_scheduled(["order", "marker"], self.inbox)

    async def assert_notified(self, times: int) -> None:
        """Exactly ``times`` notifications for "order": a later marker proves no more are coming."""
        if times:
            await self.inbox.wait_for("order", times)
        await self.notify.publish_job_scheduled("marker")
        await self.inbox.wait_for("marker")
        assert self.inbox.received.count("order") == times

    async def chains(self) -> int:
        async with self.state.transaction(read_only=True) as tx:
            return len((await tx.jobs_list(JobsList(type_names=["order"]))).items)


@pytest.fixture
async def setup(
    postgres_url: str, pg_state: PostgresStateAdapter, pg_notify: PostgresNotifyAdapter
) -> AsyncIterator[Setup]:
    types = JobTypes()
    types.define("order", input=Order, output=None, entry=True)
    setup = Setup(Client(pg_state, pg_notify, types), pg_state, pg_notify, conninfo(postgres_url))
    with psycopg.connect(setup.dsn, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE TABLE {} (n integer)").format(setup.orders))
    await setup.listen()
    yield setup


class RollbackError(Exception):
    pass


async def count_orders(setup: Setup) -> int:
    async with await psycopg.AsyncConnection.connect(setup.dsn) as connection:
        cursor = await connection.execute(sql.SQL("SELECT count(*) FROM {}").format(setup.orders))
        row = await cursor.fetchone()
    return int(row[0]) if row else 0


# ---------------------------------------------------------------- psycopg


async def test_psycopg_rollback_leaves_no_chain_and_sends_nothing(setup: Setup) -> None:
    async def order_then_fail(connection: psycopg.AsyncConnection[object]) -> None:
        async with connection.transaction():
            await connection.execute(sql.SQL("INSERT INTO {} VALUES (1)").format(setup.orders))
            async with setup.client.transaction(connection=connection) as tx:
                await setup.client.start_chain(tx, setup.types.get("order"), Order(n=1))
            raise RollbackError

    async with await psycopg.AsyncConnection.connect(setup.dsn, autocommit=True) as connection:
        with pytest.raises(RollbackError):
            await order_then_fail(connection)
    assert await setup.chains() == 0
    assert await count_orders(setup) == 0
    await setup.assert_notified(0)


async def test_psycopg_commit_creates_the_chain_and_notifies_once(setup: Setup) -> None:
    async with await psycopg.AsyncConnection.connect(setup.dsn, autocommit=True) as connection:
        async with connection.transaction():
            await connection.execute(sql.SQL("INSERT INTO {} VALUES (1)").format(setup.orders))
            async with setup.client.transaction(connection=connection) as tx:
                started = await setup.client.start_chain(tx, setup.types.get("order"), Order(n=1))
            assert await setup.chains() == 0, "visible before the caller committed"
        await tx.flush()  # psycopg reports no commit: the caller flushes after committing
    assert await setup.client.get_chain(started.chain.id) is not None
    assert await count_orders(setup) == 1
    await setup.assert_notified(1)


async def test_autocommit_psycopg_connection_outside_a_transaction_is_refused(setup: Setup) -> None:
    from jobchain.errors import InvalidArgumentError

    async with await psycopg.AsyncConnection.connect(setup.dsn, autocommit=True) as connection:
        with pytest.raises(InvalidArgumentError, match="not inside a transaction"):
            async with setup.client.transaction(connection=connection):
                pass


# ---------------------------------------------------------------- SQLAlchemy


@pytest.fixture
async def engine(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    url = postgres_url.replace("postgresql://", "postgresql+psycopg://", 1)
    engine = create_async_engine(url)
    yield engine
    await engine.dispose()


def insert_order(setup: Setup) -> str:
    return f'INSERT INTO "{setup.schema}".orders VALUES (1)'


async def test_sqlalchemy_session_rollback_leaves_no_chain_and_sends_nothing(
    setup: Setup, engine: AsyncEngine
) -> None:
    async def order_then_fail() -> None:
        async with AsyncSession(engine) as session, session.begin():
            await session.execute(text(insert_order(setup)))
            async with setup.client.transaction(connection=session) as tx:
                await setup.client.start_chain(tx, setup.types.get("order"), Order(n=1))
            raise RollbackError

    with pytest.raises(RollbackError):
        await order_then_fail()
    assert await setup.chains() == 0
    assert await count_orders(setup) == 0
    await setup.assert_notified(0)


async def test_sqlalchemy_session_commit_creates_the_chain_and_notifies_once(
    setup: Setup, engine: AsyncEngine
) -> None:
    async with AsyncSession(engine) as session, session.begin():
        await session.execute(text(insert_order(setup)))
        async with setup.client.transaction(connection=session) as tx:
            started = await setup.client.start_chain(tx, setup.types.get("order"), Order(n=1))
    # The session reports its commit: the notification goes out without a manual flush.
    await setup.assert_notified(1)
    assert await setup.client.get_chain(started.chain.id) is not None
    assert await count_orders(setup) == 1


async def test_sqlalchemy_connection_rollback_leaves_no_chain(setup: Setup, engine: AsyncEngine) -> None:
    async def order_then_fail() -> None:
        async with engine.connect() as connection, connection.begin():
            await connection.execute(text(insert_order(setup)))
            async with setup.client.transaction(connection=connection) as tx:
                await setup.client.start_chain(tx, setup.types.get("order"), Order(n=1))
            raise RollbackError

    with pytest.raises(RollbackError):
        await order_then_fail()
    assert await setup.chains() == 0
    assert await count_orders(setup) == 0
    await setup.assert_notified(0)


async def test_sqlalchemy_connection_commit_creates_the_chain(setup: Setup, engine: AsyncEngine) -> None:
    async with engine.connect() as connection:
        async with connection.begin():
            await connection.execute(text(insert_order(setup)))
            async with setup.client.transaction(connection=connection) as tx:
                started = await setup.client.start_chain(tx, setup.types.get("order"), Order(n=1))
    # The connection reports its commit too: no manual flush.
    await setup.assert_notified(1)
    assert await setup.client.get_chain(started.chain.id) is not None


async def test_adapter_over_an_sqlalchemy_engine_runs_its_own_transactions(
    engine: AsyncEngine, schema_name: str
) -> None:
    from jobchain.contracts import JobsCreate, NewJob
    from jobchain.entities import new_id
    from jobchain_postgres import StateOptions

    adapter = PostgresStateAdapter.from_sqlalchemy(engine, StateOptions(schema=schema_name))
    await adapter.migrate()
    job = NewJob(id=new_id(), type_name="t", chain_type_name="t")
    async with adapter.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[job]))
    async with adapter.transaction(read_only=True) as tx:
        assert [j.id for j in (await tx.jobs_list(JobsList())).items] == [job.id]
    await adapter.close()


async def test_adapter_over_a_callers_pool_leaves_the_pool_open(postgres_url: str, schema_name: str) -> None:
    from psycopg_pool import AsyncConnectionPool

    from jobchain.contracts import JobsCreate, NewJob
    from jobchain.entities import new_id
    from jobchain_postgres import StateOptions

    pool: AsyncConnectionPool[psycopg.AsyncConnection[object]] = AsyncConnectionPool(
        conninfo(postgres_url), min_size=1, max_size=2, open=False
    )
    await pool.open()
    try:
        adapter = PostgresStateAdapter.from_pool(pool, StateOptions(schema=schema_name))
        await adapter.migrate()
        job = NewJob(id=new_id(), type_name="t", chain_type_name="t")
        async with adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[job]))
        await adapter.close()
        async with pool.connection() as connection:
            cursor = await connection.execute(
                sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema_name, "jobchain_job"))
            )
            assert await cursor.fetchone() == (1,)
    finally:
        await pool.close()


# ---------------------------------------------------------------- announced within the transaction


class CountingNotify(PostgresNotifyAdapter):
    """Counts job-scheduled publishes made after commits (announcements bypass them)."""

    published: int = 0

    async def publish_job_scheduled(self, type_name: str) -> None:
        if type_name == "order":
            self.published += 1
        await super().publish_job_scheduled(type_name)


async def test_starts_on_the_notify_database_announce_themselves_and_publish_nothing_after_commit(
    setup: Setup, postgres_url: str, channel_prefix: str
) -> None:
    notify = await CountingNotify.open(postgres_url, NotifyOptions(channel_prefix=channel_prefix))
    assert isinstance(notify, CountingNotify)
    try:
        assert notify.announce_channel_for(setup.state) == f"{channel_prefix}_sched"
        client = Client(setup.state, notify, setup.types)
        async with client.transaction() as tx:
            await client.start_chain(tx, setup.types.get("order"), Order(n=1))
        async with client.transaction(autocommit=True) as tx:
            await client.start_chains(tx, [ChainStart(job_type=setup.types.get("order"), input=Order(n=2))])
        await setup.assert_notified(2)
        assert notify.published == 0, "an announced start was published again after its commit"
    finally:
        await notify.close()


async def test_a_psycopg_commit_wakes_listeners_without_a_flush(setup: Setup) -> None:
    async with await psycopg.AsyncConnection.connect(setup.dsn, autocommit=True) as connection:
        async with connection.transaction():
            async with setup.client.transaction(connection=connection) as tx:
                await setup.client.start_chain(tx, setup.types.get("order"), Order(n=1))
    # No tx.flush(): the notice was part of the caller's transaction.
    await setup.assert_notified(1)


async def test_a_start_in_a_rolled_back_savepoint_is_not_announced(setup: Setup) -> None:
    async def start_then_fail(tx: Transaction) -> None:
        async with tx.savepoint() as inner:
            await setup.client.start_chain(inner, setup.types.get("order"), Order(n=1))
            raise RollbackError

    async with setup.client.transaction() as tx:
        with pytest.raises(RollbackError):
            await start_then_fail(tx)
        await setup.client.start_chain(tx, setup.types.get("order"), Order(n=2))
    assert await setup.chains() == 1
    await setup.assert_notified(1)


async def test_a_notify_adapter_listening_on_another_database_is_published_to_after_commit(
    setup: Setup, postgres_url: str, channel_prefix: str
) -> None:
    other_db = postgres_url.rsplit("/", 1)[0] + "/postgres"
    notify = await CountingNotify.open(other_db, NotifyOptions(channel_prefix=channel_prefix))
    assert isinstance(notify, CountingNotify)
    try:
        assert notify.announce_channel_for(setup.state) is None
        client = Client(setup.state, notify, setup.types)
        async with client.transaction() as tx:
            await client.start_chain(tx, setup.types.get("order"), Order(n=1))
        assert notify.published == 1
    finally:
        await notify.close()
