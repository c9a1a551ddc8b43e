"""Migration 0010 (issue 34, finding 10: revoked dashboard sessions): a database at 0009 holding
jobs, a pause and a schedule upgrades with every row intact, and sessions revoke on it; the
table holds each revoked id's SHA-256 (never the id), and the statement that revokes deletes
the expired revocations."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from jobchain.contracts import (
    JobComplete,
    JobsAcquire,
    JobsCreate,
    NewJob,
    SessionRevoked,
    SessionsRevoke,
)
from jobchain.contracts.scheduling import TypesPause
from jobchain.entities import new_id
from jobchain_postgres import PostgresStateAdapter, StateOptions
from jobchain_postgres.queries import Queries, migration, migration_names

from .conftest import conninfo, open_state
from .test_migrations import ledger

NOW = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=30)
TABLES = ("job", "job_blocker", "worker", "ordering_key", "type_control", "schedule")


def _migrate_to(url: str, schema: str, last: str) -> None:
    queries = Queries(schema, "jobchain_")
    with psycopg.connect(conninfo(url), autocommit=True) as connection:
        connection.execute(queries.migration_bootstrap)
        for name in migration_names():
            if name > last:
                break
            with connection.transaction():
                connection.execute(migration(name, schema, "jobchain_"))
                connection.execute(queries.migration_record, {"name": name})


def _rows(url: str, schema: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(conninfo(url)) as connection:
        return {
            table: connection.execute(
                sql.SQL("SELECT * FROM {} ORDER BY 1").format(sql.Identifier(schema, f"jobchain_{table}"))
            ).fetchall()
            for table in TABLES
        }


def _revocations(url: str, schema: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(conninfo(url)) as connection:
        return connection.execute(
            sql.SQL("SELECT session_key, expires_at FROM {} ORDER BY 1").format(
                sql.Identifier(schema, "jobchain_session_revocation")
            )
        ).fetchall()


def _new(type_name: str = "t") -> NewJob:
    return NewJob(id=new_id(), type_name=type_name, chain_type_name=type_name)


async def test_a_database_at_0009_upgrades_with_its_rows_and_revokes_sessions(
    postgres_url: str, schema_name: str
) -> None:
    _migrate_to(postgres_url, schema_name, "0009_hot_path")
    old = await PostgresStateAdapter.open(postgres_url, StateOptions(schema=schema_name, pool_min_size=0))
    jobs = [_new(), _new(), _new("other")]
    try:
        async with old.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=jobs, now=NOW))
            claimed = await tx.jobs_acquire(
                JobsAcquire(type_names=["t"], worker_id="w", lease_for=LEASE, limit=1, now=NOW)
            )
            await tx.job_complete(
                JobComplete(job_id=claimed.jobs[0].id, worker_id="w", output={"n": 1}, now=NOW)
            )
            await tx.types_pause(TypesPause(type_names=["other"], paused=True, now=NOW))
    finally:
        await old.close()
    before = _rows(postgres_url, schema_name)
    assert len(before["job"]) == 3
    assert len(before["type_control"]) == 1

    adapter = await open_state(postgres_url, schema_name)  # applies 0010
    try:
        assert ledger(postgres_url, schema_name) == migration_names()
        assert "0010_session_revocations" in migration_names()
        assert _rows(postgres_url, schema_name) == before
        async with adapter.autocommit() as tx:
            await tx.sessions_revoke(
                SessionsRevoke(session_id="sid-1", expires_at=NOW + timedelta(hours=12), now=NOW)
            )
        async with adapter.transaction(read_only=True) as tx:
            assert await tx.session_revoked(SessionRevoked(session_id="sid-1", now=NOW))
            assert not await tx.session_revoked(SessionRevoked(session_id="sid-2", now=NOW))
        # The old rows keep working on the new layout.
        async with adapter.transaction() as tx:
            more = await tx.jobs_acquire(
                JobsAcquire(type_names=["t", "other"], worker_id="w2", lease_for=LEASE, limit=5, now=NOW)
            )
            # Two "t" jobs of one moment: which was claimed first is the id order, not the list's.
            left = [job.id for job in jobs[:2] if job.id != claimed.jobs[0].id]
            assert [job.id for job in more.jobs] == left  # "other" stays paused
    finally:
        await adapter.close()


async def test_the_table_holds_only_hashes_and_a_revoke_deletes_the_expired(
    postgres_url: str, schema_name: str
) -> None:
    adapter = await open_state(postgres_url, schema_name)
    try:
        async with adapter.autocommit() as tx:
            await tx.sessions_revoke(
                SessionsRevoke(session_id="secret-sid", expires_at=NOW + timedelta(hours=1), now=NOW)
            )
        assert _revocations(postgres_url, schema_name) == [
            (hashlib.sha256(b"secret-sid").hexdigest(), NOW + timedelta(hours=1))
        ]
        later = NOW + timedelta(hours=2)
        async with adapter.autocommit() as tx:
            await tx.sessions_revoke(
                SessionsRevoke(session_id="other", expires_at=later + timedelta(hours=1), now=later)
            )
        assert [row[0] for row in _revocations(postgres_url, schema_name)] == [
            hashlib.sha256(b"other").hexdigest()
        ]
    finally:
        await adapter.close()
