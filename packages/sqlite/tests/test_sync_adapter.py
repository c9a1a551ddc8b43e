"""The synchronous SQLite adapter on its own connections: driven without an event loop.

Every call goes through ``jobchain.sync.drive``, which raises SyncWiringError if a coroutine
suspends; none of these tests runs an event loop.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from jobchain.contracts import ChainGet, ChainsList, JobsCreate, NewJob
from jobchain.contracts.state import StateAdapter, StateTx
from jobchain.entities import Chain, new_id
from jobchain.errors import AdapterClosedError, DuplicateJobIdError, InvalidArgumentError
from jobchain.plugins.hookspecs import BackendSpec
from jobchain.sync.drive import drive
from jobchain.url import BackendURL
from jobchain_sqlite import DatabaseLockedError, SchemaNotMigratedError, SqliteStateAdapter
from jobchain_sqlite.plugin import jobchain_backends
from jobchain_sqlite.sync import SyncSqliteStateAdapter, open_sync_state_adapter

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return drive(coroutine)


def new_job(job_id: str | None = None, **kwargs: Any) -> NewJob:
    job_id = job_id or new_id()
    kwargs.setdefault("input", {"order": 1})
    return NewJob(id=job_id, type_name="ship", chain_type_name="ship", **kwargs)


async def create(adapter: StateAdapter, jobs: list[NewJob], *, connection: object = None) -> list[str]:
    async with adapter.transaction(connection=connection) as tx:
        created = await tx.jobs_create(JobsCreate(jobs=jobs))
    return [c.job.id for c in created]


async def get_chain(adapter: StateAdapter, chain_id: str) -> Chain | None:
    async with adapter.transaction(read_only=True) as tx:
        return await tx.chain_get(ChainGet(chain_id=chain_id))


async def list_ids(adapter: StateAdapter) -> list[str]:
    ids: list[str] = []
    cursor: str | None = None
    async with adapter.transaction(read_only=True) as tx:
        while True:
            page = await tx.chains_list(ChainsList(order="asc", cursor=cursor, limit=50))
            ids.extend(chain.id for chain in page.items)
            if page.next_cursor is None:
                return ids
            cursor = page.next_cursor


@pytest.fixture
def sync_adapter(db_path: Path) -> Iterator[SyncSqliteStateAdapter]:
    adapter = SyncSqliteStateAdapter(str(db_path))
    run(adapter.migrate())
    yield adapter
    run(adapter.close())


def test_the_plugin_declares_the_sync_factory_and_it_reads_the_url_options(tmp_path: Path) -> None:
    (spec,) = [s for s in jobchain_backends() if s.scheme == "sqlite"]
    assert isinstance(spec, BackendSpec)
    assert spec.sync_factory == "jobchain_sqlite.sync:open_sync_state_adapter"
    url = BackendURL.parse(
        f"sqlite:///{tmp_path}/x.db?table_prefix=app_jc_&busy_timeout=2&synchronous=normal&max_readers=2"
    )
    adapter = open_sync_state_adapter(url)
    assert isinstance(adapter, SqliteStateAdapter)  # the same adapter, its transactions on sqlite3
    assert adapter.options.path == f"{tmp_path}/x.db"
    assert adapter.options.table_prefix == "app_jc_"
    assert adapter.options.busy_timeout == 2.0
    assert adapter.options.synchronous == "NORMAL"
    assert adapter.options.max_readers == 2
    run(adapter.migrate())
    (chain_id,) = run(create(adapter, [new_job()]))
    assert run(get_chain(adapter, chain_id)) is not None
    run(adapter.close())
    with sqlite3.connect(tmp_path / "x.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT COUNT(*) FROM app_jc_job").fetchone()[0] == 1


def test_the_sync_factory_takes_sqlalchemys_pysqlite_url(tmp_path: Path) -> None:
    adapter = open_sync_state_adapter(BackendURL.parse(f"sqlite+pysqlite:///{tmp_path}/p.db?table_prefix=p_"))
    assert adapter.options.path == f"{tmp_path}/p.db"
    assert adapter.options.table_prefix == "p_"
    run(adapter.close())


def test_create_get_and_list_run_driven(sync_adapter: SyncSqliteStateAdapter) -> None:
    first = run(create(sync_adapter, [new_job()]))
    # 100 jobs: the size from which the async adapter overlaps building with the insert task.
    batch = run(create(sync_adapter, [new_job() for _ in range(100)]))
    chain = run(get_chain(sync_adapter, first[0]))
    assert chain is not None
    assert chain.id == first[0]
    assert chain.root.input == {"order": 1}
    listed = run(list_ids(sync_adapter))
    assert len(listed) == 101
    assert set(listed) == set(first + batch)


def test_migrate_is_idempotent_and_an_unmigrated_file_is_refused(db_path: Path, tmp_path: Path) -> None:
    adapter = SyncSqliteStateAdapter(str(db_path))
    run(adapter.migrate())
    run(adapter.migrate())
    run(adapter.close())
    fresh = SyncSqliteStateAdapter(str(tmp_path / "fresh.db"))
    with pytest.raises(SchemaNotMigratedError):
        run(create(fresh, [new_job()]))
    run(fresh.close())


def test_a_failed_own_transaction_rolls_back_everything(sync_adapter: SyncSqliteStateAdapter) -> None:
    job = new_job()

    async def fail() -> None:
        async with sync_adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[job]))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        run(fail())
    assert run(get_chain(sync_adapter, job.id)) is None
    assert run(list_ids(sync_adapter)) == []


def test_a_duplicate_id_raises_the_same_error_as_the_async_adapter(
    sync_adapter: SyncSqliteStateAdapter, tmp_path: Path
) -> None:
    job = new_job()
    run(create(sync_adapter, [job]))
    with pytest.raises(DuplicateJobIdError) as sync_error:
        run(create(sync_adapter, [new_job(job.id)]))

    async def on_async() -> BaseException:
        adapter = SqliteStateAdapter(str(tmp_path / "async.db"))
        await adapter.migrate()
        try:
            await create(adapter, [job])
            with pytest.raises(DuplicateJobIdError) as async_error:
                await create(adapter, [new_job(job.id)])
            return async_error.value
        finally:
            await adapter.close()

    async_error = asyncio.run(on_async())
    assert type(sync_error.value) is type(async_error)
    assert str(sync_error.value) == str(async_error)
    assert run(list_ids(sync_adapter)) == [job.id]


def test_savepoints_nest_and_roll_back_alone(sync_adapter: SyncSqliteStateAdapter) -> None:
    kept, dropped = new_job(), new_job()

    async def undone(tx: StateTx) -> None:
        async with tx.savepoint() as inner:
            await inner.jobs_create(JobsCreate(jobs=[dropped]))
            raise RuntimeError("undo the savepoint only")

    async def work() -> None:
        async with sync_adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[kept]))
            with pytest.raises(RuntimeError):
                await undone(tx)

    run(work())
    assert run(list_ids(sync_adapter)) == [kept.id]


def test_in_memory_database_serves_reads_and_writes_on_one_connection() -> None:
    adapter = open_sync_state_adapter(BackendURL.parse("sqlite:///:memory:"))
    run(adapter.migrate())
    (chain_id,) = run(create(adapter, [new_job()]))
    assert run(get_chain(adapter, chain_id)) is not None
    run(adapter.close())


def test_a_second_own_write_transaction_in_the_same_thread_is_refused_not_deadlocked(
    sync_adapter: SyncSqliteStateAdapter,
) -> None:
    async def nested() -> None:
        async with sync_adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[new_job()]))
            async with sync_adapter.transaction():
                pass

    with pytest.raises(InvalidArgumentError, match=r"savepoint\(\)"):
        run(nested())
    assert run(list_ids(sync_adapter)) == []  # the outer transaction rolled back
    run(create(sync_adapter, [new_job()]))  # and the lock is free again


def test_a_read_inside_a_write_transaction_of_the_same_thread_uses_a_reader(
    sync_adapter: SyncSqliteStateAdapter,
) -> None:
    async def read_beside_write() -> tuple[Chain | None, Chain | None]:
        job = new_job()
        async with sync_adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[job]))
            outside = await get_chain(sync_adapter, job.id)  # a snapshot without the uncommitted job
            inside = await tx.chain_get(ChainGet(chain_id=job.id))
        return outside, inside

    outside, inside = run(read_beside_write())
    assert outside is None
    assert inside is not None


def test_busy_timeout_applies_to_writes_waiting_for_another_process(db_path: Path) -> None:
    adapter = open_sync_state_adapter(BackendURL.parse(f"sqlite:///{db_path}?busy_timeout=0.05"))
    run(adapter.migrate())
    other = sqlite3.connect(db_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's writer holds the write lock
    try:
        with pytest.raises(DatabaseLockedError):
            run(create(adapter, [new_job()]))
    finally:
        other.execute("ROLLBACK")
        other.close()
    run(create(adapter, [new_job()]))
    run(adapter.close())


def test_close_is_idempotent_and_later_transactions_are_refused(db_path: Path) -> None:
    adapter = SyncSqliteStateAdapter(str(db_path))
    run(adapter.migrate())
    run(adapter.close())
    run(adapter.close())
    assert adapter.closed
    with pytest.raises(AdapterClosedError):
        run(create(adapter, [new_job()]))


def test_threads_share_one_adapter(sync_adapter: SyncSqliteStateAdapter) -> None:
    threads_count, per_thread = 8, 15
    created: list[str] = []
    errors: list[BaseException] = []
    guard = threading.Lock()
    start = threading.Barrier(threads_count)

    def worker() -> None:
        try:
            start.wait()
            for _ in range(per_thread):
                ids = run(create(sync_adapter, [new_job()]))
                assert run(get_chain(sync_adapter, ids[0])) is not None  # readers, from any thread
                with guard:
                    created.extend(ids)
        except BaseException as error:
            with guard:
                errors.append(error)

    threads = [threading.Thread(target=worker) for _ in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert len(created) == threads_count * per_thread
    assert sorted(run(list_ids(sync_adapter))) == sorted(created)


def test_a_write_transaction_of_another_thread_waits_for_the_open_one(
    sync_adapter: SyncSqliteStateAdapter,
) -> None:
    first, second = new_job(), new_job()
    opened, release = threading.Event(), threading.Event()
    order: list[str] = []

    async def hold() -> None:
        async with sync_adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[first]))
            opened.set()
            release.wait(30)
            order.append("first commits")

    def other() -> None:
        opened.wait(30)
        run(create(sync_adapter, [second]))
        order.append("second committed")

    holder = threading.Thread(target=lambda: run(hold()))
    waiter = threading.Thread(target=other)
    holder.start()
    waiter.start()
    opened.wait(30)
    release.set()
    holder.join(30)
    waiter.join(30)
    # The second transaction could not commit before the first released the writer.
    assert order == ["first commits", "second committed"]
    assert set(run(list_ids(sync_adapter))) == {first.id, second.id}


def test_close_from_another_thread_lets_an_open_write_transaction_commit(db_path: Path) -> None:
    adapter = SyncSqliteStateAdapter(str(db_path))
    run(adapter.migrate())
    job = new_job()
    opened, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    async def hold() -> None:
        async with adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[job]))
            opened.set()
            release.wait(30)

    def holder() -> None:
        try:
            run(hold())
        except BaseException as error:
            errors.append(error)

    holding = threading.Thread(target=holder)
    holding.start()
    opened.wait(30)
    closing = threading.Thread(target=lambda: run(adapter.close()))
    closing.start()
    release.set()
    holding.join(30)
    closing.join(30)
    assert errors == []
    assert adapter.closed
    with pytest.raises(AdapterClosedError):
        run(create(adapter, [new_job()]))
    reopened = SyncSqliteStateAdapter(str(db_path))
    assert run(get_chain(reopened, job.id)) is not None
    run(reopened.close())


def test_in_memory_read_inside_a_write_of_the_same_thread_is_refused_not_deadlocked() -> None:
    adapter = open_sync_state_adapter(BackendURL.parse("sqlite:///:memory:"))
    run(adapter.migrate())

    async def nested() -> None:
        async with adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[new_job()]))
            await get_chain(adapter, "x")  # :memory: has one connection: reads take the writer

    with pytest.raises(InvalidArgumentError, match="already has a transaction"):
        run(nested())
    assert run(list_ids(adapter)) == []
    run(adapter.close())
