"""The SQLAlchemy provider: the adapter runs inside the caller's own SQLAlchemy transaction."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine

from jobchain.contracts import ChainGet, JobsCreate, NewJob
from jobchain.entities import new_id
from jobchain.errors import DuplicateJobIdError, InvalidArgumentError
from jobchain_sqlite import SqliteStateAdapter


@pytest.fixture
async def engine(db_path: Path, adapter: SqliteStateAdapter) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(f"sqlite+aiosqlite:///{db_path}")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE orders (id INTEGER PRIMARY KEY, chain_id TEXT)"))
    yield engine
    await engine.dispose()


def new_chain() -> NewJob:
    return NewJob(id=new_id(), type_name="ship", chain_type_name="ship", input={"order": 1})


async def chain_exists(adapter: SqliteStateAdapter, chain_id: str) -> bool:
    async with adapter.transaction(read_only=True) as tx:
        return await tx.chain_get(ChainGet(chain_id=chain_id)) is not None


async def order_count(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text("SELECT COUNT(*) FROM orders"))).scalar_one())


async def test_rolled_back_sqlalchemy_transaction_leaves_no_chain(
    adapter: SqliteStateAdapter, engine: AsyncEngine
) -> None:
    job = new_chain()
    async with engine.connect() as conn:
        trans = await conn.begin()
        await conn.execute(text("INSERT INTO orders (chain_id) VALUES (:c)"), {"c": job.id})
        async with adapter.transaction(connection=conn) as tx:
            (created,) = await tx.jobs_create(JobsCreate(jobs=[job]))
        assert created.job.id == job.id
        await trans.rollback()
    assert not await chain_exists(adapter, job.id)
    assert await order_count(engine) == 0


async def test_committed_sqlalchemy_transaction_keeps_the_chain_and_the_domain_write(
    adapter: SqliteStateAdapter, engine: AsyncEngine
) -> None:
    job = new_chain()
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO orders (chain_id) VALUES (:c)"), {"c": job.id})
        async with adapter.transaction(connection=conn) as tx:
            await tx.jobs_create(JobsCreate(jobs=[job]))
        # Not committed yet: the adapter's own readers must not see it.
        assert not await chain_exists(adapter, job.id)
    assert await chain_exists(adapter, job.id)
    assert await order_count(engine) == 1


async def test_savepoint_as_first_statement_stays_inside_the_callers_transaction(
    adapter: SqliteStateAdapter, engine: AsyncEngine
) -> None:
    # pysqlite begins lazily at the first INSERT/UPDATE/DELETE. A SAVEPOINT sent before that
    # would open (and its RELEASE commit) a transaction of its own, outside the caller's.
    job = new_chain()
    async with engine.connect() as conn:
        trans = await conn.begin()
        async with adapter.transaction(connection=conn) as tx, tx.savepoint() as inner:
            await inner.jobs_create(JobsCreate(jobs=[job]))
        await trans.rollback()
    assert not await chain_exists(adapter, job.id)


async def test_async_session_joins_and_its_commit_decides(
    adapter: SqliteStateAdapter, engine: AsyncEngine
) -> None:
    kept, dropped = new_chain(), new_chain()
    async with AsyncSession(engine) as session:
        async with session.begin(), adapter.transaction(connection=session) as tx:
            await tx.jobs_create(JobsCreate(jobs=[kept]))
        async with session.begin():
            async with adapter.transaction(connection=session) as tx:
                await tx.jobs_create(JobsCreate(jobs=[dropped]))
            await session.rollback()
    assert await chain_exists(adapter, kept.id)
    assert not await chain_exists(adapter, dropped.id)


async def test_savepoint_rollback_inside_a_joined_transaction_keeps_the_outer_work(
    adapter: SqliteStateAdapter, engine: AsyncEngine
) -> None:
    outer, inner = new_chain(), new_chain()
    async with engine.begin() as conn, adapter.transaction(connection=conn) as tx:
        await tx.jobs_create(JobsCreate(jobs=[outer]))
        with pytest.raises(RuntimeError, match="handler failed"):  # noqa: PT012 -- the savepoint is the subject
            async with tx.savepoint() as sp:
                await sp.jobs_create(JobsCreate(jobs=[inner]))
                raise RuntimeError("handler failed")
    assert await chain_exists(adapter, outer.id)
    assert not await chain_exists(adapter, inner.id)


async def test_connection_outside_a_transaction_is_refused(
    adapter: SqliteStateAdapter, engine: AsyncEngine
) -> None:
    async with engine.connect() as conn:
        with pytest.raises(InvalidArgumentError, match="not inside a transaction"):
            async with adapter.transaction(connection=conn):
                pass


async def test_unknown_connection_type_is_refused(adapter: SqliteStateAdapter) -> None:
    with pytest.raises(InvalidArgumentError, match=r"aiosqlite\.Connection or an SQLAlchemy"):
        async with adapter.transaction(connection=object()):
            pass


async def test_duplicate_id_in_a_plain_batch_raises_and_the_transaction_goes_on(
    adapter: SqliteStateAdapter, engine: AsyncEngine
) -> None:
    taken, fresh, later = new_chain(), new_chain(), new_chain()
    async with adapter.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[taken]))
    async with engine.begin() as conn:
        async with adapter.transaction(connection=conn) as tx:
            with pytest.raises(DuplicateJobIdError) as raised:
                await tx.jobs_create(JobsCreate(jobs=[fresh, taken]))
            assert raised.value.job_id == taken.id
            [created] = await tx.jobs_create(JobsCreate(jobs=[later]))
        assert created.job.input == {"order": 1}
    assert not await chain_exists(adapter, fresh.id)
    assert await chain_exists(adapter, later.id)
