"""Bad input: each failure is a typed error naming the file and what to do; nothing is corrupted."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from jobchain.contracts import JobGet, JobsCreate, NewJob
from jobchain.entities import new_id
from jobchain.errors import TransientStateError
from jobchain_sqlite import (
    DatabaseLockedError,
    DatabaseNotWritableError,
    NotASqliteDatabaseError,
    SchemaNotMigratedError,
    SchemaTooNewError,
    SqliteOptions,
    SqliteStateAdapter,
)


async def test_path_that_cannot_be_opened_for_writing_is_a_typed_error(tmp_path: Path) -> None:
    missing_dir = tmp_path / "no" / "such" / "dir" / "jobs.db"
    adapter = SqliteStateAdapter(SqliteOptions(path=str(missing_dir)))
    with pytest.raises(DatabaseNotWritableError) as info:
        await adapter.migrate()
    assert str(missing_dir) in str(info.value)
    assert "writable" in str(info.value)
    assert info.value.path == str(missing_dir)
    assert not missing_dir.parent.exists()
    await adapter.close()


async def test_directory_as_database_path_is_a_typed_error(tmp_path: Path) -> None:
    adapter = SqliteStateAdapter(SqliteOptions(path=str(tmp_path)))
    with pytest.raises(DatabaseNotWritableError, match=str(tmp_path)):
        async with adapter.transaction():
            pass
    await adapter.close()


async def test_file_that_is_not_a_database_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    content = b"these are my notes, not a database\n" * 200
    path.write_bytes(content)
    adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
    with pytest.raises(NotASqliteDatabaseError) as info:
        await adapter.migrate()
    assert str(path) in str(info.value)
    with pytest.raises(NotASqliteDatabaseError):
        async with adapter.transaction(read_only=True):
            pass
    await adapter.close()
    assert path.read_bytes() == content
    assert not Path(f"{path}-wal").exists()  # noqa: ASYNC240 -- a one-off check in a test


async def test_database_migrated_by_a_newer_library_is_refused(db_path: Path) -> None:
    adapter = SqliteStateAdapter(SqliteOptions(path=str(db_path)))
    await adapter.migrate()
    job = NewJob(id=new_id(), type_name="t", chain_type_name="t")
    async with adapter.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[job]))
    await adapter.close()
    with sqlite3.connect(db_path) as conn:
        conn.execute("INSERT INTO jobchain_migration VALUES ('0999_from_the_future', '2030-01-01T00:00:00Z')")
    conn.close()

    newer = SqliteStateAdapter(SqliteOptions(path=str(db_path)))
    with pytest.raises(SchemaTooNewError) as info:
        await newer.migrate()
    assert "0999_from_the_future" in str(info.value)
    assert "upgrade jobchain-sqlite" in str(info.value)
    assert str(db_path) in str(info.value)
    with pytest.raises(SchemaTooNewError):
        async with newer.transaction():
            pass
    await newer.close()
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT id FROM jobchain_job").fetchall() == [(job.id,)]
    conn.close()


async def test_write_lock_held_beyond_the_busy_timeout_is_a_transient_error(db_path: Path) -> None:
    adapter = SqliteStateAdapter(SqliteOptions(path=str(db_path), busy_timeout=0.05))
    await adapter.migrate()
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(DatabaseLockedError) as info:
            async with adapter.transaction() as tx:
                await tx.jobs_create(
                    JobsCreate(jobs=[NewJob(id=new_id(), type_name="t", chain_type_name="t")])
                )
        assert isinstance(info.value, TransientStateError)
        assert str(db_path) in str(info.value)
        assert "busy_timeout" in str(info.value)
        # Readers never wait for the writer (WAL), so reads still work meanwhile.
        async with adapter.transaction(read_only=True) as tx:
            assert await tx.job_get(JobGet(job_id=new_id())) is None
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    async with adapter.transaction() as tx:  # the adapter recovers once the lock is gone
        await tx.jobs_create(JobsCreate(jobs=[NewJob(id=new_id(), type_name="t", chain_type_name="t")]))
    await adapter.close()


async def test_unmigrated_database_says_to_run_migrate(db_path: Path) -> None:
    adapter = SqliteStateAdapter(SqliteOptions(path=str(db_path)))
    with pytest.raises(SchemaNotMigratedError, match="migrate"):
        async with adapter.transaction(read_only=True) as tx:
            await tx.job_get(JobGet(job_id=new_id()))
    await adapter.close()
