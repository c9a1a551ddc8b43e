"""Migration 0007_scheduling on a 0006 database holding rows: every row kept, read back with
priority 0 and no ordering key, blockers resolved by completion only, the new tables and the
(empty) priority index in place, and the same schema as a fresh database."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobchain.contracts import JobComplete, JobsAcquire, JobsCreate, JobsList, NewJob
from jobchain.entities import new_id
from jobchain.errors import SchemaNotMigratedError
from jobchain_sqlite import SqliteOptions, SqliteStateAdapter
from jobchain_sqlite.queries import MIGRATIONS, migration_statements, queries

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
OLD = "2029-12-31T00:00:00.000000Z"
SCHEMA = "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name LIKE 'jobchain_%' ORDER BY name"


def migrate_to(path: Path, last: str) -> None:
    q = queries("jobchain_")
    with sqlite3.connect(path) as conn:
        conn.execute(q.migration_table_create)
        for name in MIGRATIONS[: MIGRATIONS.index(last) + 1]:
            for statement in migration_statements(name, "jobchain_"):
                conn.execute(statement)
            conn.execute(q.migration_record, {"name": name, "applied_at": OLD})
    conn.close()


def dump(path: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(sql).fetchall()
    conn.close()
    return rows


def seed_0006(path: Path) -> dict[str, str]:
    """A 0006 database: a running chain, a job blocked by it, a pending and a completed job."""
    migrate_to(path, "0006_queue_stats")
    ids = {name: new_id() for name in ("running", "blocked", "pending", "done")}
    insert = (
        "INSERT INTO jobchain_job (id, type_name, chain_id, chain_type_name, chain_index, status,"
        " created_at, scheduled_at, leased_by, leased_until, lease_generation, attempt, completed_at)"
        " VALUES (?, 't', ?, 't', 0, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    with sqlite3.connect(path) as conn:
        for name, job_id in ids.items():
            running = name == "running"
            conn.execute(
                insert,
                (
                    job_id,
                    job_id,
                    "completed" if name == "done" else name,
                    OLD,
                    OLD,
                    "w" if running else None,
                    "2030-01-01T12:05:00.000000Z" if running else None,
                    1 if running else 0,
                    1 if running else 0,
                    OLD if name == "done" else None,
                ),
            )
        conn.execute(
            "INSERT INTO jobchain_job_blocker (job_id, blocked_by_chain_id, idx) VALUES (?, ?, 0)",
            (ids["blocked"], ids["running"]),
        )
    conn.close()
    return ids


async def test_upgrade_from_0006_keeps_the_rows_and_reads_them_with_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    ids = seed_0006(path)
    jobs_before = dump(path, "SELECT * FROM jobchain_job ORDER BY id")
    blockers_before = dump(path, "SELECT * FROM jobchain_job_blocker")
    adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
    try:
        await adapter.migrate()
        assert [row[:-2] for row in dump(path, "SELECT * FROM jobchain_job ORDER BY id")] == jobs_before
        assert dump(path, "SELECT DISTINCT priority, ordering_key FROM jobchain_job") == [(0, None)]
        assert dump(path, "SELECT * FROM jobchain_job_blocker") == [(*blockers_before[0], 0)]
        assert dump(path, "SELECT COUNT(*) FROM jobchain_ordering_key") == [(0,)]
        assert dump(path, "SELECT COUNT(*) FROM jobchain_type_control") == [(0,)]
        assert dump(path, "SELECT COUNT(*) FROM jobchain_schedule") == [(0,)]
        assert dump(path, "PRAGMA integrity_check") == [("ok",)]
        assert dump(path, "PRAGMA foreign_key_check") == []
        async with adapter.transaction() as tx:
            jobs = {job.id: job for job in (await tx.jobs_list(JobsList())).items}
            assert all(job.priority == 0 and job.ordering_key is None for job in jobs.values())
            # The old rows work with the new claim and the new blocker column.
            [pending] = (
                await tx.jobs_acquire(
                    JobsAcquire(type_names=["t"], worker_id="w2", lease_for=timedelta(minutes=5), now=T0)
                )
            ).jobs
            completed = await tx.job_complete(JobComplete(job_id=ids["running"], worker_id="w", now=T0))
            [created] = await tx.jobs_create(
                JobsCreate(jobs=[NewJob(id=new_id(), type_name="t", chain_type_name="t", priority=7)], now=T0)
            )
        assert pending.id == ids["pending"]
        assert [job.id for job in completed.unblocked_jobs] == [ids["blocked"]]
        assert created.job.priority == 7
    finally:
        await adapter.close()


async def test_a_fresh_database_and_one_upgraded_from_0006_have_the_same_schema(tmp_path: Path) -> None:
    fresh, upgraded = tmp_path / "fresh.db", tmp_path / "upgraded.db"
    seed_0006(upgraded)
    for path in (fresh, upgraded):
        adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
        await adapter.migrate()
        await adapter.close()
    assert dump(fresh, SCHEMA) == dump(upgraded, SCHEMA)
    names = {row[1] for row in dump(fresh, SCHEMA)}
    assert {
        "jobchain_ordering_key",
        "jobchain_ordering_key_last_chain_idx",
        "jobchain_type_control",
        "jobchain_schedule",
        "jobchain_job_priority_idx",
    } <= names
    [(index_sql,)] = dump(fresh, "SELECT sql FROM sqlite_master WHERE name = 'jobchain_job_priority_idx'")
    assert "(type_name, priority DESC, scheduled_at, created_at, id)" in str(index_sql)
    assert "WHERE status = 'pending' AND priority <> 0" in str(index_sql)


async def test_a_0006_database_is_refused_until_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    seed_0006(path)
    adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
    try:
        missing = (
            "0007_scheduling, 0008_session_revocations, 0009_worker_incarnation, 0010_worker_load,"
            " 0011_end_hooks not applied"
        )
        with pytest.raises(SchemaNotMigratedError, match=missing):
            async with adapter.transaction(read_only=True) as tx:
                await tx.jobs_list(JobsList())
    finally:
        await adapter.close()
