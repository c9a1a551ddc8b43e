"""The synchronous SQLite adapter joining a caller's transaction: sqlite3 and SQLAlchemy sync.

The caller's commit decides: a rollback leaves nothing, a commit keeps the chain and the
caller's own write together. Every call is driven (``jobchain.sync.drive``), no event loop.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import aiosqlite
import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import Session

from jobchain.contracts import ChainGet, ChainsDelete, JobsCreate
from jobchain.errors import DuplicateJobIdError, InvalidArgumentError
from jobchain.sync.drive import drive
from jobchain_sqlite import SqliteStateAdapter
from jobchain_sqlite.sync import SyncSqliteStateAdapter

from .test_sync_adapter import create, get_chain, list_ids, new_job


@pytest.fixture
def sync_adapter(db_path: Path) -> Iterator[SyncSqliteStateAdapter]:
    adapter = SyncSqliteStateAdapter(str(db_path))
    drive(adapter.migrate())
    with sqlite3.connect(db_path) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, chain_id TEXT)")
    yield adapter
    drive(adapter.close())


def orders(db_path: Path) -> list[str]:
    with sqlite3.connect(db_path) as conn:
        return [row[0] for row in conn.execute("SELECT chain_id FROM orders")]


def exists(adapter: SyncSqliteStateAdapter, chain_id: str) -> bool:
    return drive(get_chain(adapter, chain_id)) is not None


# ------------------------------------------------------------------ stdlib sqlite3


@pytest.mark.parametrize("isolation_level", ["", "DEFERRED", None])
@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_a_joined_sqlite3_transaction_commits_or_rolls_back_with_the_callers_write(
    sync_adapter: SyncSqliteStateAdapter, db_path: Path, isolation_level: str | None, outcome: str
) -> None:
    conn = sqlite3.connect(db_path, isolation_level=cast(Any, isolation_level))
    job = new_job()
    if isolation_level is None:
        conn.execute("BEGIN")  # autocommit mode (Django inside atomic): the caller begins
    conn.execute("INSERT INTO orders (chain_id) VALUES (?)", (job.id,))
    assert drive(create(sync_adapter, [job], connection=conn)) == [job.id]
    assert not exists(sync_adapter, job.id)  # uncommitted: the adapter's readers do not see it
    conn.commit() if outcome == "commit" else conn.rollback()
    assert exists(sync_adapter, job.id) is (outcome == "commit")
    assert orders(db_path) == ([job.id] if outcome == "commit" else [])
    conn.close()


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_joining_a_default_connection_before_its_first_write_opens_the_transaction_it_commits(
    sync_adapter: SyncSqliteStateAdapter, db_path: Path, outcome: str
) -> None:
    conn = sqlite3.connect(db_path)  # isolation_level '': sqlite3 would begin at the first write
    assert not conn.in_transaction
    job = new_job()
    drive(create(sync_adapter, [job], connection=conn))
    assert conn.in_transaction  # jobchain never commits a joined connection
    conn.execute("INSERT INTO orders (chain_id) VALUES (?)", (job.id,))  # the same transaction
    conn.commit() if outcome == "commit" else conn.rollback()
    assert exists(sync_adapter, job.id) is (outcome == "commit")
    assert orders(db_path) == ([job.id] if outcome == "commit" else [])
    conn.close()


def test_an_autocommit_connection_outside_a_transaction_is_refused_for_writes(
    sync_adapter: SyncSqliteStateAdapter, db_path: Path
) -> None:
    conn = sqlite3.connect(db_path, isolation_level=None)  # Django outside transaction.atomic()
    job = new_job()
    with pytest.raises(InvalidArgumentError, match=r"autocommit.*atomic\(\)"):
        drive(create(sync_adapter, [job], connection=conn))
    assert not conn.in_transaction
    assert drive(list_ids(sync_adapter)) == []
    conn.close()


def test_reads_join_an_autocommit_connection_without_opening_a_transaction(
    sync_adapter: SyncSqliteStateAdapter, db_path: Path
) -> None:
    (chain_id,) = drive(create(sync_adapter, [new_job()]))
    for isolation_level in (None, ""):
        conn = sqlite3.connect(db_path, isolation_level=cast(Any, isolation_level))

        async def read(conn: sqlite3.Connection = conn) -> Any:
            async with sync_adapter.transaction(read_only=True, connection=conn) as tx:
                return await tx.chain_get(ChainGet(chain_id=chain_id))

        chain = drive(read())
        assert chain is not None
        assert chain.id == chain_id
        assert not conn.in_transaction
        conn.close()


def test_a_read_in_the_callers_transaction_sees_its_uncommitted_start(
    sync_adapter: SyncSqliteStateAdapter, db_path: Path
) -> None:
    conn = sqlite3.connect(db_path)
    job = new_job()
    drive(create(sync_adapter, [job], connection=conn))

    async def read() -> Any:
        async with sync_adapter.transaction(read_only=True, connection=conn) as tx:
            return await tx.chain_get(ChainGet(chain_id=job.id))

    assert drive(read()) is not None
    conn.rollback()
    assert drive(read()) is None
    conn.close()


def test_a_savepoint_first_stays_inside_the_callers_transaction(
    sync_adapter: SyncSqliteStateAdapter, db_path: Path
) -> None:
    conn = sqlite3.connect(db_path)
    job = new_job()

    async def work() -> None:
        async with sync_adapter.transaction(connection=conn) as tx, tx.savepoint() as inner:
            await inner.jobs_create(JobsCreate(jobs=[job]))

    drive(work())
    conn.rollback()
    assert not exists(sync_adapter, job.id)
    conn.close()


def test_a_duplicate_id_in_a_joined_transaction_raises_typed_and_keeps_the_callers_work(
    sync_adapter: SyncSqliteStateAdapter, db_path: Path
) -> None:
    taken = new_job()
    drive(create(sync_adapter, [taken]))
    conn = sqlite3.connect(db_path)
    conn.execute("INSERT INTO orders (chain_id) VALUES ('mine')")
    with pytest.raises(DuplicateJobIdError):
        drive(create(sync_adapter, [new_job(taken.id)], connection=conn))
    conn.commit()  # SQLite undid the failing statement only
    assert orders(db_path) == ["mine"]
    assert drive(list_ids(sync_adapter)) == [taken.id]
    conn.close()


def test_the_callers_row_factory_and_django_style_type_detection_are_left_alone(
    sync_adapter: SyncSqliteStateAdapter, db_path: Path
) -> None:
    # Django connects with PARSE_DECLTYPES | PARSE_COLNAMES and registers converters such as
    # "timestamp"; jobchain's columns are TEXT and INTEGER, so nothing is converted under it.
    sqlite3.register_converter("timestamp", lambda raw: datetime.fromisoformat(raw.decode()))
    conn = sqlite3.connect(db_path, detect_types=sqlite3.PARSE_DECLTYPES | sqlite3.PARSE_COLNAMES)
    factory = lambda cursor, row: ("mine", row)  # noqa: E731
    conn.row_factory = factory
    job = new_job(input={"n": 1})

    async def work() -> Any:
        async with sync_adapter.transaction(connection=conn) as tx:
            await tx.jobs_create(JobsCreate(jobs=[job]))
            return await tx.chain_get(ChainGet(chain_id=job.id))

    chain = drive(work())
    assert chain is not None
    assert chain.root.input == {"n": 1}
    assert chain.root.created_at.tzinfo is not None
    assert conn.row_factory is factory
    assert conn.execute("SELECT 1").fetchone() == ("mine", (1,))
    conn.commit()
    conn.close()


def test_a_caller_connection_with_foreign_keys_off_still_deletes_blocker_rows(
    sync_adapter: SyncSqliteStateAdapter, db_path: Path
) -> None:
    blocker = new_job()
    dependent = new_job(blocker_chain_ids=[blocker.id])
    drive(create(sync_adapter, [blocker]))
    drive(create(sync_adapter, [dependent]))
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 0

    async def delete() -> Any:
        async with sync_adapter.transaction(connection=conn) as tx:
            return await tx.chains_delete(ChainsDelete(chain_ids=[dependent.id], cascade=True))

    deleted = drive(delete())
    conn.commit()
    assert {chain.id for chain in deleted.chains} == {blocker.id, dependent.id}
    with sqlite3.connect(db_path) as check:
        assert check.execute("SELECT COUNT(*) FROM jobchain_job_blocker").fetchone()[0] == 0
    conn.close()


# ------------------------------------------------------------------ SQLAlchemy sync


@pytest.fixture
def engine(sync_adapter: SyncSqliteStateAdapter, db_path: Path) -> Iterator[Engine]:
    engine = create_engine(f"sqlite:///{db_path}")
    yield engine
    engine.dispose()


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_a_session_decides_with_its_commit(
    sync_adapter: SyncSqliteStateAdapter, engine: Engine, db_path: Path, outcome: str
) -> None:
    job = new_job()
    with Session(engine) as session:
        # Joined before the session's first statement: the adapter begins the session's transaction.
        drive(create(sync_adapter, [job], connection=session))
        session.execute(text("INSERT INTO orders (chain_id) VALUES (:c)"), {"c": job.id})
        assert not exists(sync_adapter, job.id)
        session.commit() if outcome == "commit" else session.rollback()
    assert exists(sync_adapter, job.id) is (outcome == "commit")
    assert orders(db_path) == ([job.id] if outcome == "commit" else [])


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_a_connection_inside_begin_decides_with_its_commit(
    sync_adapter: SyncSqliteStateAdapter, engine: Engine, outcome: str
) -> None:
    job = new_job()
    with engine.connect() as conn:
        trans = conn.begin()
        drive(create(sync_adapter, [job], connection=conn))
        trans.commit() if outcome == "commit" else trans.rollback()
    assert exists(sync_adapter, job.id) is (outcome == "commit")


def test_a_sqlalchemy_connection_outside_a_transaction_is_refused(
    sync_adapter: SyncSqliteStateAdapter, engine: Engine
) -> None:
    with engine.connect() as conn, pytest.raises(InvalidArgumentError, match=r"conn\.begin\(\)"):
        drive(create(sync_adapter, [new_job()], connection=conn))
    assert drive(list_ids(sync_adapter)) == []


def test_an_autocommit_engine_is_refused(sync_adapter: SyncSqliteStateAdapter, db_path: Path) -> None:
    engine = create_engine(f"sqlite:///{db_path}", isolation_level="AUTOCOMMIT")
    with Session(engine) as session, pytest.raises(InvalidArgumentError, match="AUTOCOMMIT"):
        drive(create(sync_adapter, [new_job()], connection=session))
    engine.dispose()
    assert drive(list_ids(sync_adapter)) == []


def test_a_session_on_another_dialect_is_refused_before_it_connects(
    sync_adapter: SyncSqliteStateAdapter,
) -> None:
    engine = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    with Session(engine) as session:
        with pytest.raises(InvalidArgumentError, match=r"postgresql\+psycopg.*sqlite:///"):
            drive(create(sync_adapter, [new_job()], connection=session))
        assert not session.in_transaction()


# ------------------------------------------------------------------ unsupported objects


def test_unsupported_connection_objects_get_a_typed_error_naming_the_supported_ones(
    sync_adapter: SyncSqliteStateAdapter, db_path: Path
) -> None:
    supported = r"sqlite3\.Connection, or an SQLAlchemy Session or Connection"
    for wrong in (object(), "sqlite:///x.db"):
        with pytest.raises(InvalidArgumentError, match=supported):
            drive(create(sync_adapter, [new_job()], connection=wrong))

    async_engine = create_async_engine(f"sqlite+aiosqlite:///{db_path}")
    from sqlalchemy.ext.asyncio import AsyncSession

    with pytest.raises(InvalidArgumentError, match="AsyncSession/AsyncConnection belong to the async"):
        drive(create(sync_adapter, [new_job()], connection=AsyncSession(async_engine)))

    aio = aiosqlite.connect(str(db_path))  # not started: only its type matters
    with pytest.raises(InvalidArgumentError, match="aiosqlite connection belongs to the async client"):
        drive(create(sync_adapter, [new_job()], connection=aio))
    assert drive(list_ids(sync_adapter)) == []


async def test_the_async_adapter_points_a_sqlite3_connection_at_the_sync_client(db_path: Path) -> None:
    adapter = SqliteStateAdapter(str(db_path))
    conn = sqlite3.connect(db_path)
    with pytest.raises(InvalidArgumentError, match=r"jobchain\.sync"):
        async with adapter.transaction(connection=conn):
            pass
    conn.close()
    await adapter.close()
