"""SQLite-specific behaviour beyond the conformance suite: URLs, plugin, pragmas, prefixes,
in-memory mode, joined aiosqlite connections, query plans."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import aiosqlite
import pytest

from jobchain.connect_backends import open_state
from jobchain.contracts import ChainGet, JobGet, JobsAcquire, JobsCreate, JobsList, NewJob, StateAdapter
from jobchain.entities import new_id
from jobchain.errors import AdapterClosedError, InvalidArgumentError, InvalidURLError
from jobchain.plugins.registry import get_registry
from jobchain.url import BackendURL
from jobchain_sqlite import SqliteOptions, SqliteStateAdapter
from jobchain_sqlite.queries import migration_statements, queries


def new_chain(type_name: str = "t") -> NewJob:
    return NewJob(id=new_id(), type_name=type_name, chain_type_name=type_name)


async def create(adapter: StateAdapter, *jobs: NewJob) -> None:
    async with adapter.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=jobs))


async def job_ids(adapter: StateAdapter) -> set[str]:
    async with adapter.transaction(read_only=True) as tx:
        return {job.id for job in (await tx.jobs_list(JobsList())).items}


@pytest.fixture
def in_tmp_dir(tmp_path: Path) -> Iterator[Path]:
    before = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(before)


class TestUrlsAndPlugin:
    def test_plugin_declares_sqlite_state_through_the_entry_point(self) -> None:
        spec = get_registry().lookup("sqlite", "state")
        assert (spec.distribution, spec.factory) == (
            "jobchain-sqlite",
            "jobchain_sqlite.state:open_state_adapter",
        )

    async def test_relative_url_opens_a_file_in_the_working_directory(self, in_tmp_dir: Path) -> None:
        adapter = await open_state("sqlite:///relative.db")
        assert isinstance(adapter, SqliteStateAdapter)
        await adapter.migrate()
        await adapter.close()
        assert (in_tmp_dir / "relative.db").is_file()

    async def test_absolute_url_uses_four_slashes(self, tmp_path: Path) -> None:
        path = tmp_path / "abs.db"
        adapter = await open_state(f"sqlite:///{path}")  # 'sqlite:///' + '/tmp/…' = four slashes
        assert isinstance(adapter, SqliteStateAdapter)
        assert adapter.options.path == str(path)
        await adapter.migrate()
        await adapter.close()
        assert path.is_file()

    @pytest.mark.parametrize(
        "url", ["sqlite:///:memory:", "sqlite://:memory:", "sqlite+aiosqlite:///:memory:"]
    )
    async def test_in_memory_forms_open_a_private_working_database(self, url: str) -> None:
        adapter = await open_state(url)
        assert isinstance(adapter, SqliteStateAdapter)
        assert adapter.options.in_memory
        await adapter.migrate()
        job = new_chain()
        await create(adapter, job)
        assert await job_ids(adapter) == {job.id}
        await adapter.close()

    def test_url_options_are_parsed(self) -> None:
        url = BackendURL.parse(
            "sqlite:///x.db?table_prefix=jc_&busy_timeout=2.5&synchronous=normal&max_readers=2"
        )
        options = SqliteOptions.from_url(url)
        assert (options.path, options.table_prefix, options.busy_timeout) == ("x.db", "jc_", 2.5)
        assert (options.synchronous, options.max_readers) == ("NORMAL", 2)

    @pytest.mark.parametrize(
        ("url", "message"),
        [
            ("sqlite://host/x.db", "host part"),
            ("sqlite:///", "names no file"),
            ("sqlite:///x.db?colour=red", "unknown option"),
            ("sqlite:///x.db?table_prefix=drop%20table", "table prefix"),
            ("sqlite:///x.db?busy_timeout=soon", "busy_timeout"),
            ("sqlite:///x.db?synchronous=sometimes", "synchronous"),
            ("sqlite+pysqlite:///x.db", "only driver is aiosqlite"),
        ],
    )
    def test_malformed_urls_say_what_to_change(self, url: str, message: str) -> None:
        with pytest.raises((InvalidURLError, InvalidArgumentError), match=message):
            SqliteOptions.from_url(BackendURL.parse(url))


class TestConnections:
    async def test_every_own_connection_enforces_foreign_keys_in_wal_mode(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        for read_only in (False, True):
            async with adapter.transaction(read_only=read_only) as tx:
                assert await tx.job_get(JobGet(job_id=new_id())) is None
        conns = [adapter._writer, *adapter._idle_readers]
        assert len(conns) == 2
        for conn in conns:
            assert conn is not None
            assert (await conn.execute_fetchall("PRAGMA foreign_keys"))[0][0] == 1
            assert (await conn.execute_fetchall("PRAGMA journal_mode"))[0][0] == "wal"

    async def test_read_only_transaction_refuses_writes(self, adapter: SqliteStateAdapter) -> None:
        async with adapter.transaction(read_only=True) as tx:
            with pytest.raises(InvalidArgumentError, match="read-only"):
                await tx.jobs_create(JobsCreate(jobs=[new_chain()]))

    async def test_closed_adapter_refuses_work_and_close_is_idempotent(self, db_path: Path) -> None:
        adapter = SqliteStateAdapter(SqliteOptions(path=str(db_path)))
        await adapter.migrate()
        await adapter.close()
        await adapter.close()
        with pytest.raises(AdapterClosedError):
            adapter.transaction()
        with pytest.raises(AdapterClosedError):
            await adapter.migrate()

    async def test_table_prefixes_isolate_adapters_sharing_a_file(self, db_path: Path) -> None:
        first = SqliteStateAdapter(SqliteOptions(path=str(db_path), table_prefix="app_one_"))
        second = SqliteStateAdapter(SqliteOptions(path=str(db_path), table_prefix="app_two_"))
        for adapter in (first, second):
            await adapter.migrate()
        a, b = new_chain(), new_chain()
        await create(first, a)
        await create(second, b)
        assert await job_ids(first) == {a.id}
        assert await job_ids(second) == {b.id}
        for adapter in (first, second):
            await adapter.close()

    async def test_joined_aiosqlite_connection_follows_the_callers_commit(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        kept, dropped = new_chain(), new_chain()
        async with aiosqlite.connect(db_path) as conn:
            async with adapter.transaction(connection=conn) as tx:
                await tx.jobs_create(JobsCreate(jobs=[dropped]))
            await conn.rollback()
            async with adapter.transaction(connection=conn) as tx:
                await tx.jobs_create(JobsCreate(jobs=[kept]))
                assert await tx.chain_get(ChainGet(chain_id=kept.id)) is not None
            assert await job_ids(adapter) == set()  # not committed yet
            await conn.commit()
        assert await job_ids(adapter) == {kept.id}

    async def test_migrate_is_idempotent(self, adapter: SqliteStateAdapter) -> None:
        job = new_chain()
        await create(adapter, job)
        await adapter.migrate()
        await adapter.migrate()
        assert await job_ids(adapter) == {job.id}


class TestPlans:
    """The hot statements use the partial indexes (SQLite's EXPLAIN QUERY PLAN)."""

    @staticmethod
    def plan(db_path: Path, sql: str, params: dict[str, object]) -> str:
        with sqlite3.connect(db_path) as conn:
            rows = conn.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()
        conn.close()
        return "\n".join(str(row[-1]) for row in rows)

    async def test_acquire_uses_the_pending_index(self, adapter: SqliteStateAdapter, db_path: Path) -> None:
        async with adapter.transaction() as tx:
            await tx.jobs_acquire(
                JobsAcquire(type_names=["t"], worker_id="w", lease_for=timedelta(seconds=5))
            )
        params = {"type_names": '["t"]', "now": "x", "worker_id": "w", "leased_until": "x", "limit": 1}
        params["type_leases"] = None
        assert "jobchain_job_acquisition_idx" in self.plan(db_path, queries("jobchain_").jobs_acquire, params)

    async def test_reaper_uses_the_expired_lease_index(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        params = {"type_names": '["t"]', "exclude_job_ids": "[]", "now": "x", "limit": 1}
        plan = self.plan(db_path, queries("jobchain_").jobs_reap_candidates, params)
        assert "jobchain_job_expired_lease_idx" in plan

    async def test_deduplication_lookup_uses_the_dedup_index(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        items = '[{"i":0,"id":"a","chain_id":null,"chain_index":0,"chain_type_name":"t","dedup_key":"k",'
        items += '"dedup_from":null,"dedup_incomplete":1,"exclude":[]}]'
        plan = self.plan(
            db_path,
            queries("jobchain_").jobs_create_lookup,
            {"items": items, "blocker_chain_ids": "[]", "ordering_keys": "[]"},
        )
        assert "jobchain_job_deduplication_idx" in plan

    async def test_unblocking_starts_from_the_blocker_index_not_every_blocked_job(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        plan = self.plan(db_path, queries("jobchain_").job_unblock, {"chain_id": "x", "now": "x"})
        assert "jobchain_job_blocker_chain_idx" in plan
        assert "jobchain_job_listing_status_idx" not in plan

    async def test_trigger_counts_by_primary_key_not_by_status(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        plan = self.plan(
            db_path, queries("jobchain_").jobs_trigger, {"job_ids": "[]", "now": "x", "distinct_count": 1}
        )
        assert "status=?" not in plan
        assert "(id=?)" in plan

    async def test_status_listing_scans_the_created_at_index(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        """Why 0003 dropped (status, created_at): the status filter never used it."""
        with sqlite3.connect(db_path) as conn:
            indexes = {row[1] for row in conn.execute("PRAGMA index_list(jobchain_job)")}
        conn.close()
        assert "jobchain_job_listing_status_idx" not in indexes
        params: dict[str, object] = {
            name: "[]" for name in ("type_names", "chain_type_names", "chain_ids", "job_ids")
        }
        params |= {"statuses": '["pending"]', "error_types": "[]", "limit": 10}
        params |= dict.fromkeys(("created_from", "created_to", "after_key", "after_id"))
        plan = self.plan(db_path, queries("jobchain_").jobs_list_desc, params)
        assert "jobchain_job_listing_idx" in plan


class TestCancellation:
    async def test_cancelled_transaction_rolls_back_and_frees_the_writer(
        self, adapter: SqliteStateAdapter
    ) -> None:
        entered = asyncio.Event()
        lost = new_chain()

        async def stuck() -> None:
            async with adapter.transaction() as tx:
                await tx.jobs_create(JobsCreate(jobs=[lost]))
                entered.set()
                await asyncio.Event().wait()  # never set: the task is cancelled here

        task = asyncio.create_task(stuck())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        kept = new_chain()
        await create(adapter, kept)
        assert await job_ids(adapter) == {kept.id}

    async def test_cancelling_while_waiting_for_the_writer_lock_leaves_no_transaction_open(
        self, adapter: SqliteStateAdapter
    ) -> None:
        holding = asyncio.Event()
        release = asyncio.Event()

        async def holder() -> None:
            async with adapter.transaction() as tx:
                await tx.jobs_create(JobsCreate(jobs=[new_chain()]))
                holding.set()
                await release.wait()

        async def waiter() -> None:
            async with adapter.transaction() as tx:
                await tx.jobs_create(JobsCreate(jobs=[new_chain()]))

        first = asyncio.create_task(holder())
        await holding.wait()
        second = asyncio.create_task(waiter())
        await asyncio.sleep(0)  # let it queue on the writer lock
        second.cancel()
        release.set()
        await first
        with pytest.raises(asyncio.CancelledError):
            await second
        assert len(await job_ids(adapter)) == 1
        await create(adapter, new_chain())
        assert len(await job_ids(adapter)) == 2


class TestSchema:
    async def test_migration_creates_the_tables_and_partial_indexes(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        with sqlite3.connect(db_path) as conn:
            objects = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE name LIKE 'jobchain_%'"))
        conn.close()
        for table in ("jobchain_job", "jobchain_job_blocker", "jobchain_migration"):
            assert table in objects
        statuses = "('blocked', 'pending', 'running', 'completed', 'failed', 'cancelled')"
        assert f"CHECK (status IN {statuses})" in objects["jobchain_job"]
        partial = {
            "jobchain_job_acquisition_idx": "status = 'pending'",
            "jobchain_job_expired_lease_idx": "status = 'running' AND leased_until IS NOT NULL",
            "jobchain_job_deduplication_idx": "deduplication_key IS NOT NULL AND chain_index = 0",
            "jobchain_job_chain_listing_idx": "chain_index = 0",
        }
        for index, condition in partial.items():
            assert condition in objects[index]
        assert "UNIQUE INDEX" in objects["jobchain_job_chain_index_idx"]
        assert "jobchain_job_blocker_chain_idx" in objects

    async def test_database_from_the_first_migration_upgrades_and_keeps_its_jobs(self, db_path: Path) -> None:
        # A database migrated (and used) by a version that only knew 0001_initial.
        old = new_chain()
        q = queries("jobchain_")
        with sqlite3.connect(db_path) as conn:
            for statement in migration_statements("0001_initial", "jobchain_"):
                conn.execute(statement)
            conn.execute(q.migration_table_create)
            conn.execute(
                q.migration_record, {"name": "0001_initial", "applied_at": "2024-01-01T00:00:00.000000Z"}
            )
            conn.execute(
                "INSERT INTO jobchain_job (id, type_name, chain_id, chain_type_name, chain_index, status,"
                " created_at, scheduled_at) VALUES (?, 't', ?, 't', 0, 'pending', ?, ?)",
                (old.id, old.id, "2024-01-01T00:00:00.000000Z", "2024-01-01T00:00:00.000000Z"),
            )
        conn.close()
        adapter = SqliteStateAdapter(SqliteOptions(path=str(db_path)))
        try:
            await adapter.migrate()
            async with adapter.transaction() as tx:
                before = await tx.job_get(JobGet(job_id=old.id))
                claimed = await tx.jobs_acquire(
                    JobsAcquire(type_names=["t"], worker_id="w", lease_for=timedelta(minutes=1))
                )
        finally:
            await adapter.close()
        assert before is not None
        assert (before.first_attempt_at, before.attempt_started_at) == (None, None)
        [job] = claimed.jobs
        assert job.id == old.id
        assert job.first_attempt_at is not None
        assert job.attempt_started_at == job.first_attempt_at
        with sqlite3.connect(db_path) as conn:
            names = [row[0] for row in conn.execute("SELECT name FROM jobchain_migration ORDER BY name")]
            indexes = {row[1] for row in conn.execute("PRAGMA index_list(jobchain_job)")}
        conn.close()
        assert names == [
            "0001_initial",
            "0002_attempt_start",
            "0003_drop_listing_status_idx",
            "0004_worker_registry",
            "0005_job_lifecycle",
            "0006_queue_stats",
            "0007_scheduling",
            "0008_session_revocations",
            "0009_worker_incarnation",
            "0010_worker_load",
            "0011_end_hooks",
        ]
        assert "jobchain_job_listing_status_idx" not in indexes
        assert "jobchain_job_listing_idx" in indexes

    async def test_status_outside_the_state_machine_is_rejected_by_the_database(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        job = new_chain()
        await create(adapter, job)
        with sqlite3.connect(db_path) as conn, pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute("UPDATE jobchain_job SET status = 'exploded' WHERE id = ?", (job.id,))
        conn.close()


class TestAcquireHasMore:
    async def test_has_more_sees_jobs_that_tie_on_schedule_and_creation_time(
        self, adapter: SqliteStateAdapter
    ) -> None:
        # One batch: every job has the same scheduled_at and created_at, only ids differ.
        await create(adapter, *(new_chain() for _ in range(3)))
        seen: list[tuple[int, bool]] = []
        for _ in range(4):
            async with adapter.transaction() as tx:
                got = await tx.jobs_acquire(
                    JobsAcquire(type_names=["t", "other"], worker_id="w", lease_for=timedelta(minutes=1))
                )
            seen.append((len(got.jobs), got.has_more))
        assert seen == [(1, True), (1, True), (1, False), (0, False)]

    async def test_full_batch_reports_no_more_when_nothing_else_is_eligible(
        self, adapter: SqliteStateAdapter
    ) -> None:
        await create(adapter, *(new_chain() for _ in range(2)))
        async with adapter.transaction() as tx:
            got = await tx.jobs_acquire(
                JobsAcquire(type_names=["t"], worker_id="w", lease_for=timedelta(minutes=1), limit=2)
            )
        assert (len(got.jobs), got.has_more) == (2, False)
