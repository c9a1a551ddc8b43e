"""The synchronous PostgreSQL state adapter (jobchain.sync): the async adapter's code, driven.

Every test here is a plain function: no event loop runs, and every adapter coroutine is run by
``jobchain.sync.drive.drive``, which raises SyncWiringError if one ever suspends. This module
covers the adapter's own pool; ``test_sync_adapter_joined.py`` joins callers' transactions.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, contextmanager
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest
from psycopg import sql

from jobchain.contracts import ChainGet, ChainsList, JobGet, JobsCreate, JobsList
from jobchain.contracts.capabilities import Capability
from jobchain.errors import (
    AdapterClosedError,
    BackendUnreachableError,
    DuplicateJobIdError,
    InvalidArgumentError,
)
from jobchain.plugins.hookspecs import BackendSpec
from jobchain.sync.drive import drive
from jobchain.url import BackendURL
from jobchain_conformance.helpers import new_job
from jobchain_postgres import PostgresStateAdapter, StateOptions
from jobchain_postgres.migrate import pending_migrations
from jobchain_postgres.plugin import jobchain_backends
from jobchain_postgres.providers import database_of
from jobchain_postgres.sync import SyncPoolProvider, SyncPostgresStateAdapter, open_sync_state_adapter
from jobchain_postgres.sync_driver import SyncConnectionView, SyncCursorView, async_view

from .conftest import conninfo, with_query

T = TypeVar("T")


@contextmanager
def driven(manager: AbstractAsyncContextManager[T]) -> Iterator[T]:
    """An adapter's ``async with`` block run synchronously (as jobchain.sync runs it)."""
    value = drive(manager.__aenter__())
    try:
        yield value
    except BaseException as error:
        if not drive(manager.__aexit__(type(error), error, error.__traceback__)):
            raise
    else:
        drive(manager.__aexit__(None, None, None))


def chain_ids(adapter: PostgresStateAdapter) -> list[str]:
    """Ids of every chain in the adapter's schema, read in a transaction of its own."""
    with driven(adapter.transaction(read_only=True)) as tx:
        return [c.id for c in drive(tx.chains_list(ChainsList(limit=500))).items]


# ------------------------------------------------------------ construction


def test_plugin_declares_the_sync_factory() -> None:
    specs: list[BackendSpec] = [s for s in jobchain_backends() if s.role == "state"]
    assert {s.scheme for s in specs} == {"postgresql", "postgres"}
    for spec in specs:
        assert spec.sync_factory == "jobchain_postgres.sync:open_sync_state_adapter"
    notify = [s for s in jobchain_backends() if s.role == "notify"]
    assert all(not s.sync_factory for s in notify)


def test_factory_honours_url_options(postgres_url: str, schema_name: str) -> None:
    url = with_query(postgres_url, schema=schema_name, table_prefix="jq_", claim="atomic-update")
    adapter = open_sync_state_adapter(BackendURL.parse(url))
    try:
        assert isinstance(adapter, SyncPostgresStateAdapter)
        assert adapter.options.schema == schema_name
        assert adapter.options.table_prefix == "jq_"
        assert adapter.options.claim == "atomic-update"
        assert Capability.CONCURRENT_TRANSACTIONS not in adapter.capabilities
        # Same database as an async adapter of this URL: PostgreSQL notify can announce in-statement.
        assert adapter.database == database_of(conninfo(postgres_url))
        drive(adapter.migrate())
        with psycopg.connect(conninfo(postgres_url)) as connection:
            tables = connection.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", [schema_name]
            ).fetchall()
        assert {"jq_job", "jq_migration"} <= {t[0] for t in tables}
    finally:
        drive(adapter.close())


def test_unreachable_server_is_a_typed_error() -> None:
    url = BackendURL.parse("postgresql://postgres@127.0.0.1:1/test?connect_timeout=1")
    with pytest.raises(BackendUnreachableError):
        open_sync_state_adapter(url)


def test_migrate_is_idempotent_and_complete(sync_state: SyncPostgresStateAdapter, postgres_url: str) -> None:
    drive(sync_state.migrate())  # the fixture migrated once already
    with psycopg.connect(conninfo(postgres_url)) as connection:
        options = sync_state.options
        pending = drive(pending_migrations(async_view(connection), options.schema, options.table_prefix))
    assert pending == []


# ------------------------------------------------------------ own transactions


def test_create_then_read_and_list(sync_state: SyncPostgresStateAdapter) -> None:
    jobs = [new_job(type_name="mail", input={"n": n}) for n in range(3)]
    with driven(sync_state.transaction()) as tx:
        created = drive(tx.jobs_create(JobsCreate(jobs=jobs)))
    assert [c.job.id for c in created] == [j.id for j in jobs]
    assert all(not c.deduplicated for c in created)

    with driven(sync_state.transaction(read_only=True)) as tx:
        chain = drive(tx.chain_get(ChainGet(chain_id=jobs[1].id)))
        job = drive(tx.job_get(JobGet(job_id=jobs[2].id)))
        first = drive(tx.chains_list(ChainsList(type_names=["mail"], limit=2)))
        rest = drive(tx.chains_list(ChainsList(type_names=["mail"], limit=2, cursor=first.next_cursor)))
        listed = drive(tx.jobs_list(JobsList(type_names=["mail"])))
    assert chain is not None
    assert chain.root.input == {"n": 1}
    assert job is not None
    assert job.input == {"n": 2}
    assert (len(first.items), len(rest.items), rest.next_cursor) == (2, 1, None)
    assert {c.id for c in [*first.items, *rest.items]} == {j.id for j in jobs}
    assert {j.id for j in listed.items} == {j.id for j in jobs}


def test_error_in_own_transaction_rolls_back(sync_state: SyncPostgresStateAdapter) -> None:
    job = new_job()

    def fail_after_creating() -> None:
        with driven(sync_state.transaction()) as tx:
            drive(tx.jobs_create(JobsCreate(jobs=[job])))
            raise LookupError("the caller's code failed")

    with pytest.raises(LookupError):
        fail_after_creating()
    assert chain_ids(sync_state) == []


def test_duplicate_id_is_the_typed_error_and_a_savepoint_recovers(
    sync_state: SyncPostgresStateAdapter,
) -> None:
    job, other = new_job(), new_job()
    with driven(sync_state.transaction()) as tx:
        drive(tx.jobs_create(JobsCreate(jobs=[job])))
    with driven(sync_state.transaction()) as tx:
        with pytest.raises(DuplicateJobIdError) as raised, driven(tx.savepoint()) as inner:
            drive(inner.jobs_create(JobsCreate(jobs=[new_job(id=job.id)])))
        assert raised.value.job_id == job.id
        assert not tx.poisoned
        drive(tx.jobs_create(JobsCreate(jobs=[other])))
    assert sorted(chain_ids(sync_state)) == sorted([job.id, other.id])


def test_autocommit_operations(sync_state: SyncPostgresStateAdapter) -> None:
    job = new_job()
    with driven(sync_state.autocommit()) as tx:
        drive(tx.jobs_create(JobsCreate(jobs=[job])))
        with pytest.raises(DuplicateJobIdError):
            drive(tx.jobs_create(JobsCreate(jobs=[new_job(id=job.id)])))
    assert chain_ids(sync_state) == [job.id]


def test_closed_adapter_refuses_and_close_is_idempotent(postgres_url: str, schema_name: str) -> None:
    adapter = SyncPostgresStateAdapter.open_sync(
        postgres_url, StateOptions(schema=schema_name, pool_min_size=0)
    )
    drive(adapter.migrate())
    drive(adapter.close())
    drive(adapter.close())
    provider = adapter._provider
    assert isinstance(provider, SyncPoolProvider)
    assert provider.pool.closed
    with pytest.raises(AdapterClosedError):
        adapter.transaction()


def test_callers_sync_pool_is_used_and_left_open(postgres_url: str, schema_name: str) -> None:
    from psycopg_pool import ConnectionPool

    with ConnectionPool(conninfo(postgres_url), min_size=1, max_size=2, open=True) as pool:
        adapter = SyncPostgresStateAdapter.from_sync_pool(pool, StateOptions(schema=schema_name))
        drive(adapter.migrate())
        job = new_job()
        with driven(adapter.transaction()) as tx:
            drive(tx.jobs_create(JobsCreate(jobs=[job])))
        assert chain_ids(adapter) == [job.id]
        assert drive(adapter.reserve_connections(8)) == 2  # your pool keeps its size
        drive(adapter.close())
        assert not pool.closed
        with pool.connection() as connection:
            count = connection.execute(
                sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema_name, "jobchain_job"))
            ).fetchone()
        assert count == (1,)


@pytest.mark.pg_connections(6)  # measured 6: threads each holding a pooled connection
def test_threads_share_one_adapter(sync_state: SyncPostgresStateAdapter) -> None:
    # Threaded web servers (Django, Flask) start chains from many threads through one client.
    def start_some(_: int) -> list[str]:
        jobs = [new_job() for _ in range(5)]
        for job in jobs:
            with driven(sync_state.transaction()) as tx:
                drive(tx.jobs_create(JobsCreate(jobs=[job])))
        return [job.id for job in jobs]

    with ThreadPoolExecutor(max_workers=6) as pool:
        started = [job_id for ids in pool.map(start_some, range(12)) for job_id in ids]
    assert sorted(chain_ids(sync_state)) == sorted(started)
    assert len(started) == 60


def test_vacuum_and_reserve_run_driven(sync_state: SyncPostgresStateAdapter) -> None:
    drive(sync_state.vacuum())
    assert drive(sync_state.reserve_connections(12)) == 12  # the adapter's own pool grows
    with driven(sync_state.transaction()) as tx:
        drive(tx.jobs_create(JobsCreate(jobs=[new_job()])))


@pytest.mark.parametrize("name", ["from_pool", "from_connection", "from_sqlalchemy"])
def test_async_constructors_are_refused(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match="async adapter's constructor"):
        getattr(SyncPostgresStateAdapter, name)(object())
    with pytest.raises(InvalidArgumentError, match="open_sync"):
        drive(SyncPostgresStateAdapter.open("postgresql://postgres@127.0.0.1/test"))


# ------------------------------------------------------------ the view covers what the adapter uses

_SOURCES = Path(__file__).parents[1] / "src" / "jobchain_postgres"
_STATE_PATH = ["state.py", "migrate.py", "_tx.py", *(p.name for p in _SOURCES.glob("_*.py"))]
_NOT_STATE_PATH = {"_listener.py", "__init__.py", "_identifiers.py"}


def _touched(pattern: str) -> set[str]:
    names: set[str] = set()
    for name in set(_STATE_PATH) - _NOT_STATE_PATH:
        names.update(re.findall(pattern, (_SOURCES / name).read_text()))
    return names


def test_the_view_offers_every_connection_and_cursor_attribute_the_adapter_touches() -> None:
    connection = _touched(r"(?:self\._conn|\bconnection)\.([a-z_]+)")
    cursor = _touched(r"\bcursor\.([a-z_]+)")
    assert {"cursor", "pipeline", "transaction", "info"} <= connection  # the scan finds them
    assert {"execute", "fetchall", "adapters"} <= cursor
    assert sorted(n for n in connection if not hasattr(SyncConnectionView, n)) == []
    assert sorted(n for n in cursor if not hasattr(SyncCursorView, n)) == []


@pytest.fixture
def sync_state(postgres_url: str, schema_name: str) -> Iterator[SyncPostgresStateAdapter]:
    adapter = SyncPostgresStateAdapter.open_sync(
        postgres_url, StateOptions(schema=schema_name, pool_min_size=0)
    )
    drive(adapter.migrate())
    yield adapter
    drive(adapter.close())
