"""Migration 0008_session_revocations (issue 34, finding 10) on a 0007 database holding rows:
every row kept, the revocation table in place and working, the same schema as a fresh
database; and the table holds each revoked id's SHA-256, never the id."""

from __future__ import annotations

import hashlib
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from jobchain.contracts import JobComplete, JobsAcquire, JobsList, SessionRevoked, SessionsRevoke
from jobchain.entities import new_id
from jobchain_sqlite import SqliteOptions, SqliteStateAdapter
from jobchain_sqlite.queries import MIGRATIONS, migration_statements, queries

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
OLD = "2029-12-31T00:00:00.000000Z"
SCHEMA = "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name LIKE 'jobchain_%' ORDER BY name"
TABLES = ("job", "job_blocker", "worker", "ordering_key", "type_control", "schedule")


def _dump(path: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(sql).fetchall()
    conn.close()
    return rows


def _seed_0007(path: Path) -> dict[str, str]:
    """A database migrated by the 0007 version: a pending and a running job, a paused type and
    a registered schedule, as that version wrote them."""
    q = queries("jobchain_")
    ids = {"pending": new_id(), "running": new_id()}
    with sqlite3.connect(path) as conn:
        conn.execute(q.migration_table_create)
        for name in MIGRATIONS[: MIGRATIONS.index("0007_scheduling") + 1]:
            for statement in migration_statements(name, "jobchain_"):
                conn.execute(statement)
            conn.execute(q.migration_record, {"name": name, "applied_at": OLD})
        insert = (
            "INSERT INTO jobchain_job (id, type_name, chain_id, chain_type_name, chain_index, status,"
            " created_at, scheduled_at, leased_by, leased_until, lease_generation, attempt, priority)"
            " VALUES (?, 't', ?, 't', 0, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        conn.execute(insert, (ids["pending"], ids["pending"], "pending", OLD, OLD, None, None, 0, 0, 3))
        running = (ids["running"], ids["running"], "running", OLD, OLD, "w", "2030-01-01T12:05:00.000000Z")
        conn.execute(insert, (*running, 1, 1, 0))
        conn.execute("INSERT INTO jobchain_type_control (type_name, paused_at) VALUES ('paused', ?)", (OLD,))
        conn.execute(
            "INSERT INTO jobchain_schedule (name, cron, timezone, type_name, catch_up, worker_name,"
            " registered_at, last_seen_at) VALUES ('nightly', '0 3 * * *', 'UTC', 't', 0, 'w', ?, ?)",
            (OLD, OLD),
        )
    conn.close()
    return ids


def _rows(path: Path) -> dict[str, list[tuple[object, ...]]]:
    return {table: _dump(path, f"SELECT * FROM jobchain_{table} ORDER BY 1") for table in TABLES}


async def test_upgrade_from_0007_keeps_the_rows_and_revokes_sessions(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    ids = _seed_0007(path)
    before = _rows(path)
    assert sum(len(rows) for rows in before.values()) == 4
    adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
    try:
        await adapter.migrate()
        assert _rows(path) == before
        assert ("0008_session_revocations",) in _dump(path, "SELECT name FROM jobchain_migration")
        assert _dump(path, "PRAGMA integrity_check") == [("ok",)]
        async with adapter.transaction() as tx:
            await tx.sessions_revoke(
                SessionsRevoke(session_id="sid-1", expires_at=T0 + timedelta(hours=12), now=T0)
            )
            assert await tx.session_revoked(SessionRevoked(session_id="sid-1", now=T0))
            # The old rows still work: the running job completes, the pending one is claimed.
            await tx.job_complete(JobComplete(job_id=ids["running"], worker_id="w", now=T0))
            claimed = await tx.jobs_acquire(
                JobsAcquire(type_names=["t"], worker_id="w2", lease_for=timedelta(minutes=5), now=T0)
            )
            assert [job.id for job in claimed.jobs] == [ids["pending"]]
            assert len((await tx.jobs_list(JobsList())).items) == 2
    finally:
        await adapter.close()


async def test_a_fresh_database_and_one_upgraded_from_0007_have_the_same_schema(tmp_path: Path) -> None:
    fresh, upgraded = tmp_path / "fresh.db", tmp_path / "upgraded.db"
    _seed_0007(upgraded)
    for path in (fresh, upgraded):
        adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
        await adapter.migrate()
        await adapter.close()
    assert _dump(fresh, SCHEMA) == _dump(upgraded, SCHEMA)
    names = {row[1] for row in _dump(fresh, SCHEMA)}
    assert {"jobchain_session_revocation", "jobchain_session_revocation_expires_idx"} <= names


async def test_only_the_hash_of_a_session_id_is_stored_and_expired_rows_are_deleted(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
    try:
        await adapter.migrate()
        async with adapter.transaction() as tx:
            await tx.sessions_revoke(
                SessionsRevoke(session_id="secret-sid", expires_at=T0 + timedelta(hours=1), now=T0)
            )
        rows = _dump(path, "SELECT session_key, expires_at FROM jobchain_session_revocation")
        assert rows == [(hashlib.sha256(b"secret-sid").hexdigest(), "2030-01-01T13:00:00.000000Z")]
        assert "secret-sid" not in path.read_bytes().decode("latin-1")
        async with adapter.transaction() as tx:
            later = T0 + timedelta(hours=2)
            await tx.sessions_revoke(
                SessionsRevoke(session_id="other", expires_at=later + timedelta(hours=1), now=later)
            )
        assert [row[0] for row in _dump(path, "SELECT session_key FROM jobchain_session_revocation")] == [
            hashlib.sha256(b"other").hexdigest()
        ]
    finally:
        await adapter.close()
