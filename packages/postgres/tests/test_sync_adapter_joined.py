"""The synchronous state adapter joining a caller's own transaction: a psycopg ``Connection``, an
SQLAlchemy ``Session``/``scoped_session``/``Connection`` on ``postgresql+psycopg``.

A chain started there exists exactly when the caller commits; the caller's rollback leaves
nothing; the caller's own writes and jobchain's commit together. Plain functions, no event loop:
every adapter coroutine is run by ``drive`` (SyncWiringError if one ever suspended).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session, scoped_session, sessionmaker

from jobchain.contracts import JobsCreate
from jobchain.errors import DuplicateJobIdError, InvalidArgumentError, TransientStateError
from jobchain.sync.drive import drive
from jobchain_conformance.helpers import new_job
from jobchain_postgres import StateOptions
from jobchain_postgres.sync import SyncPostgresStateAdapter

from .conftest import conninfo
from .test_sync_adapter import chain_ids, driven


def start(adapter: SyncPostgresStateAdapter, connection: object) -> str:
    """Start one chain inside ``connection``'s transaction; returns its id."""
    job = new_job(type_name="order")
    with driven(adapter.transaction(connection=connection)) as tx:
        (created,) = drive(tx.jobs_create(JobsCreate(jobs=[job])))
    assert created.job.id == job.id
    return job.id


# ------------------------------------------------------------ psycopg Connection


def test_psycopg_connection_commit_and_rollback(sync_state: SyncPostgresStateAdapter, dsn: str) -> None:
    orders = sql.Identifier(sync_state.options.schema, "orders")
    with psycopg.connect(dsn) as connection:
        connection.execute(sql.SQL("CREATE TABLE {} (n int)").format(orders))
        connection.commit()
        connection.execute(sql.SQL("INSERT INTO {} VALUES (1)").format(orders))
        kept = start(sync_state, connection)
        assert chain_ids(sync_state) == []  # not committed yet: invisible to others
        connection.commit()
        connection.execute(sql.SQL("INSERT INTO {} VALUES (2)").format(orders))
        start(sync_state, connection)
        connection.rollback()
        rows = connection.execute(sql.SQL("SELECT n FROM {}").format(orders)).fetchall()
    assert chain_ids(sync_state) == [kept]
    assert rows == [(1,)]


def test_autocommit_psycopg_connection_inside_a_transaction_block(
    sync_state: SyncPostgresStateAdapter, dsn: str
) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        with pytest.raises(InvalidArgumentError, match="autocommit"):
            drive(sync_state.transaction(connection=connection).__aenter__())
        with connection.transaction(force_rollback=True):
            start(sync_state, connection)
        with connection.transaction():
            kept = start(sync_state, connection)
    assert chain_ids(sync_state) == [kept]


def test_refusal_writes_nothing_and_raises_before_any_statement(
    sync_state: SyncPostgresStateAdapter, dsn: str
) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        manager = sync_state.transaction(connection=connection)
        with pytest.raises(InvalidArgumentError) as raised:
            drive(manager.__aenter__())
        assert "so your commit decides" in str(raised.value)
        assert connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert chain_ids(sync_state) == []


def test_callers_cursor_and_row_factory_do_not_matter(sync_state: SyncPostgresStateAdapter, dsn: str) -> None:
    # Django's psycopg connections bind client-side (a ClientCursor factory); others use dict rows.
    with psycopg.connect(dsn, row_factory=dict_row, cursor_factory=psycopg.ClientCursor) as connection:
        kept = start(sync_state, connection)
        connection.commit()
        assert connection.execute("SELECT 1 AS one").fetchone() == {"one": 1}
    assert chain_ids(sync_state) == [kept]


def test_duplicate_id_in_a_joined_transaction(sync_state: SyncPostgresStateAdapter, dsn: str) -> None:
    existing = start_own(sync_state)
    with psycopg.connect(dsn) as connection:
        with (
            pytest.raises(DuplicateJobIdError) as raised,
            driven(sync_state.transaction(connection=connection)) as tx,
        ):
            drive(tx.jobs_create(JobsCreate(jobs=[new_job(id=existing)])))
        assert raised.value.job_id == existing
        # Your transaction is aborted, as on the async path: you roll it back.
        assert connection.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
        connection.rollback()
    assert chain_ids(sync_state) == [existing]


def test_joined_savepoint_rolls_back_only_its_part(sync_state: SyncPostgresStateAdapter, dsn: str) -> None:
    existing = start_own(sync_state)
    with psycopg.connect(dsn) as connection:
        with driven(sync_state.transaction(connection=connection)) as tx:
            kept = new_job()
            drive(tx.jobs_create(JobsCreate(jobs=[kept])))
            with pytest.raises(DuplicateJobIdError), driven(tx.savepoint()) as inner:
                drive(inner.jobs_create(JobsCreate(jobs=[new_job(id=existing)])))
            assert not tx.poisoned
        connection.commit()
    assert sorted(chain_ids(sync_state)) == sorted([existing, kept.id])


def test_poisoned_own_transaction_is_a_transient_error(sync_state: SyncPostgresStateAdapter) -> None:
    existing = start_own(sync_state)
    with pytest.raises(TransientStateError), driven(sync_state.transaction()) as tx:
        with pytest.raises(DuplicateJobIdError):
            drive(tx.jobs_create(JobsCreate(jobs=[new_job(id=existing)])))
        # Swallowed by the caller: the transaction is still poisoned, so it is rolled back.
    assert chain_ids(sync_state) == [existing]


# ------------------------------------------------------------ SQLAlchemy


def test_sqlalchemy_session_commit_and_rollback(sync_state: SyncPostgresStateAdapter, engine: Engine) -> None:
    with Session(engine) as session:
        assert not session.in_transaction()
        kept = start(sync_state, session)  # begins the session's transaction
        assert session.in_transaction()
        session.commit()
        session.execute(text("SELECT 1"))
        start(sync_state, session)
        session.rollback()
    assert chain_ids(sync_state) == [kept]


def test_sqlalchemy_scoped_session(sync_state: SyncPostgresStateAdapter, engine: Engine) -> None:
    registry = scoped_session(sessionmaker(engine))
    try:
        kept = start(sync_state, registry)
        registry.commit()
    finally:
        registry.remove()
    assert chain_ids(sync_state) == [kept]


def test_sqlalchemy_connection(sync_state: SyncPostgresStateAdapter, engine: Engine) -> None:
    with engine.begin() as connection:
        kept = start(sync_state, connection)
    with engine.connect() as connection:
        with pytest.raises(InvalidArgumentError, match="not inside a transaction"):
            drive(sync_state.transaction(connection=connection).__aenter__())
        connection.begin()
        start(sync_state, connection)
        connection.rollback()
    assert chain_ids(sync_state) == [kept]


def test_sqlalchemy_autocommit_isolation_is_refused(
    sync_state: SyncPostgresStateAdapter, engine: Engine
) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection, connection.begin():
        with pytest.raises(InvalidArgumentError, match="AUTOCOMMIT"):
            drive(sync_state.transaction(connection=connection).__aenter__())
    assert chain_ids(sync_state) == []


def test_other_sqlalchemy_dialects_are_refused(sync_state: SyncPostgresStateAdapter) -> None:
    sqlite = create_engine("sqlite://")
    try:
        with Session(sqlite) as session:
            with pytest.raises(InvalidArgumentError, match=r"sqlite\+pysqlite.*postgresql\+psycopg"):
                drive(sync_state.transaction(connection=session).__aenter__())
            assert not session.in_transaction()  # refused before beginning anything
        with sqlite.begin() as connection, pytest.raises(InvalidArgumentError, match="postgresql"):
            drive(sync_state.transaction(connection=connection).__aenter__())
    finally:
        sqlite.dispose()


# ------------------------------------------------------------ what cannot be joined


@pytest.mark.parametrize("connection", [object(), "postgresql://x", 42])
def test_unsupported_objects_name_the_supported_ones(
    sync_state: SyncPostgresStateAdapter, connection: object
) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        drive(sync_state.transaction(connection=connection).__aenter__())
    message = str(raised.value)
    assert type(connection).__name__ in message
    assert "psycopg Connection" in message
    assert "SQLAlchemy Session or Connection" in message


def test_async_objects_point_to_the_async_client(sync_state: SyncPostgresStateAdapter, dsn: str) -> None:
    async def check() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as connection:
            with pytest.raises(InvalidArgumentError, match="async client"):
                # Entering only validates: the refusal comes before any statement.
                await sync_state.transaction(connection=connection).__aenter__()

    asyncio.run(check())


def test_sqlalchemy_objects_that_are_not_sessions_or_connections(
    sync_state: SyncPostgresStateAdapter, engine: Engine
) -> None:
    with pytest.raises(InvalidArgumentError, match="cannot join a Engine"):
        drive(sync_state.transaction(connection=engine).__aenter__())


# ------------------------------------------------------------ fixtures and helpers


def start_own(adapter: SyncPostgresStateAdapter) -> str:
    job = new_job()
    with driven(adapter.transaction()) as tx:
        drive(tx.jobs_create(JobsCreate(jobs=[job])))
    return job.id


@pytest.fixture
def dsn(postgres_url: str) -> str:
    return conninfo(postgres_url)


@pytest.fixture
def engine(postgres_url: str) -> Iterator[Engine]:
    url = postgres_url.replace("postgresql://", "postgresql+psycopg://", 1)
    engine = create_engine(url)
    yield engine
    engine.dispose()


@pytest.fixture
def sync_state(postgres_url: str, schema_name: str) -> Iterator[SyncPostgresStateAdapter]:
    adapter = SyncPostgresStateAdapter.open_sync(
        postgres_url, StateOptions(schema=schema_name, pool_min_size=0)
    )
    drive(adapter.migrate())
    yield adapter
    drive(adapter.close())
