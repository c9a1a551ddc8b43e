"""Migration 0005_job_lifecycle: the job table rebuilt (wider status CHECK, the lifecycle
columns) from a 0004 database holding real rows of every status, blockers and workers."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jobchain.contracts import (
    JobComplete,
    JobFail,
    JobGet,
    JobsAcquire,
    JobsCreate,
    JobsList,
    NewJob,
    WorkerHeartbeat,
    WorkersList,
)
from jobchain.entities import JobStatus, WorkerState, new_id
from jobchain.errors import SchemaNotMigratedError as CoreSchemaNotMigratedError
from jobchain_sqlite import SqliteOptions, SqliteStateAdapter
from jobchain_sqlite.queries import MIGRATIONS, migration_statements, queries

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(minutes=5)
OLD_COLUMNS = (
    "id, type_name, chain_id, chain_type_name, chain_index, status, input, output, created_at, "
    "scheduled_at, attempt, last_attempt_at, last_attempt_error, leased_by, leased_until, "
    "lease_generation, completed_at, completed_by, deduplication_key, trace_context, "
    "chain_trace_context, first_attempt_at, attempt_started_at, rescued_at, rescued_from, rescue_reason"
)


def migrate_to(path: Path, last: str) -> None:
    """Apply the migrations up to ``last`` by hand, as an older library version did."""
    q = queries("jobchain_")
    with sqlite3.connect(path) as conn:
        conn.execute(q.migration_table_create)
        for name in MIGRATIONS[: MIGRATIONS.index(last) + 1]:
            for statement in migration_statements(name, "jobchain_"):
                conn.execute(statement)
            conn.execute(q.migration_record, {"name": name, "applied_at": "2029-01-01T00:00:00.000000Z"})
    conn.close()


def dump(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(sql).fetchall()
    conn.close()
    return rows


async def seed_0004(path: Path) -> dict[str, str]:
    """Rows of every 0004 status through the 0004 statements that still apply (create, claim,
    complete, heartbeat): a completed chain with a continuation, a blocked job, a pending
    one, a running one, a rescued one, a registered worker."""
    migrate_to(path, "0004_worker_registry")
    ids = {name: new_id() for name in ("done", "blocked", "pending", "running")}
    with sqlite3.connect(path) as conn:
        now = "2030-01-01T12:00:00.000000Z"
        insert = (
            "INSERT INTO jobchain_job (id, type_name, chain_id, chain_type_name, chain_index, status,"
            " input, output, created_at, scheduled_at, attempt, leased_by, leased_until, lease_generation,"
            " completed_at, completed_by, deduplication_key, trace_context, first_attempt_at,"
            " attempt_started_at, rescued_at, rescued_from, rescue_reason, last_attempt_error)"
            " VALUES (?, ?, ?, 't', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        cont = new_id()
        ids["continuation"] = cont
        rows = [
            # A completed root, then its completed continuation (chain done).
            (
                ids["done"],
                "t",
                ids["done"],
                0,
                "completed",
                '{"n":1}',
                '"out0"',
                now,
                now,
                1,
                None,
                None,
                1,
                now,
                "w1",
                "dedup-1",
                '{"tp":"x"}',
                now,
                now,
                None,
                None,
                None,
                None,
            ),
            (
                cont,
                "t2",
                ids["done"],
                1,
                "completed",
                "[1,2]",
                '{"ok":true}',
                now,
                now,
                2,
                None,
                None,
                2,
                now,
                "w1",
                None,
                None,
                now,
                now,
                "2030-01-01T11:00:00.000000Z",
                "w0",
                "lease_expired",
                None,
            ),
            (
                ids["blocked"],
                "t",
                ids["blocked"],
                0,
                "blocked",
                None,
                None,
                now,
                now,
                0,
                None,
                None,
                0,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
            ),
            (
                ids["pending"],
                "t",
                ids["pending"],
                0,
                "pending",
                '"in"',
                None,
                now,
                now,
                3,
                None,
                None,
                3,
                None,
                None,
                None,
                None,
                now,
                now,
                now,
                "w9",
                "worker_dead",
                "attempt abandoned: worker w9",
            ),
            (
                ids["running"],
                "t",
                ids["running"],
                0,
                "running",
                None,
                None,
                now,
                now,
                1,
                "w1",
                "2030-01-01T12:05:00.000000Z",
                1,
                None,
                None,
                None,
                None,
                now,
                now,
                None,
                None,
                None,
                None,
            ),
        ]
        conn.executemany(insert, rows)
        # The blocked job waits for the running chain and the completed one.
        conn.execute(
            "INSERT INTO jobchain_job_blocker VALUES (?, ?, 0, '{\"b\":1}')", (ids["blocked"], ids["running"])
        )
        conn.execute("INSERT INTO jobchain_job_blocker VALUES (?, ?, 1, NULL)", (ids["blocked"], ids["done"]))
        conn.execute(
            "INSERT INTO jobchain_worker VALUES ('w1', 'n', 'h', 1, 'v', ?, 4, 1, 'running', ?, ?, ?)",
            ('["t"]', now, now, "2030-01-01T12:00:30.000000Z"),
        )
    conn.close()
    return ids


async def test_upgrade_from_0004_keeps_every_row_of_every_status(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    ids = await seed_0004(path)
    jobs_before = dump(path, f"SELECT {OLD_COLUMNS} FROM jobchain_job ORDER BY id")
    blockers_before = dump(path, "SELECT * FROM jobchain_job_blocker ORDER BY job_id, idx")
    workers_before = dump(path, "SELECT * FROM jobchain_worker")
    assert {row[5] for row in jobs_before} == {"completed", "blocked", "pending", "running"}

    adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
    try:
        await adapter.migrate()
        assert dump(path, f"SELECT {OLD_COLUMNS} FROM jobchain_job ORDER BY id") == jobs_before
        blockers_after = "SELECT job_id, blocked_by_chain_id, idx, trace_context FROM jobchain_job_blocker"
        assert dump(path, f"{blockers_after} ORDER BY job_id, idx") == blockers_before
        # 0009_worker_incarnation adds one column, 0010_worker_load three (every old row reads 0
        # in each) after the old ones.
        assert [row[:-4] for row in dump(path, "SELECT * FROM jobchain_worker")] == workers_before
        assert {row[-3:] for row in dump(path, "SELECT * FROM jobchain_worker")} == {(0, 0, 0)}
        new = dump(
            path,
            "SELECT DISTINCT attempt_errors, attempt_base, failed_at, cancelled_at, cancel_reason,"
            " failed_by_chain_id, runs_after_failed_blockers FROM jobchain_job",
        )
        assert new == [(None, 0, None, None, None, None, 0)]
        assert dump(path, "PRAGMA foreign_key_check") == []
        assert dump(path, "PRAGMA integrity_check") == [("ok",)]

        async with adapter.transaction() as tx:
            jobs = {job.id: job for job in (await tx.jobs_list(JobsList(limit=50))).items}
            workers = await tx.workers_list(WorkersList(now=T0))
            # The old rows work with the new operations: the running job fails, and its
            # dependent (blocked by it) fails with it.
            failed = await tx.job_fail(
                JobFail(job_id=ids["running"], error="boom", worker_id="w1", now=T0 + timedelta(seconds=1))
            )
            pending = await tx.jobs_acquire(
                JobsAcquire(type_names=["t"], worker_id="w2", lease_for=LEASE, now=T0 + timedelta(seconds=2))
            )
        assert jobs[ids["continuation"]].rescued_from == "w0"
        assert jobs[ids["continuation"]].output == {"ok": True}
        assert jobs[ids["done"]].deduplication_key == "dedup-1"
        assert jobs[ids["pending"]].attempt == 3
        assert jobs[ids["pending"]].attempts_used == 3
        assert jobs[ids["running"]].leased_by == "w1"
        assert all(job.attempt_errors == () and not job.runs_after_failed_blockers for job in jobs.values())
        assert [w.id for w in workers] == ["w1"]
        assert failed.job.status is JobStatus.FAILED
        assert [job.id for job in failed.failed_jobs] == [ids["blocked"]]
        assert failed.failed_jobs[0].failed_by_chain_id == ids["running"]
        assert [job.id for job in pending.jobs] == [ids["pending"]]
    finally:
        await adapter.close()


async def test_a_fresh_database_and_an_upgraded_one_have_the_same_schema(tmp_path: Path) -> None:
    fresh, upgraded = tmp_path / "fresh.db", tmp_path / "upgraded.db"
    await seed_0004(upgraded)
    for path in (fresh, upgraded):
        adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
        await adapter.migrate()
        await adapter.close()
    query = "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name LIKE 'jobchain_%' ORDER BY name"
    assert dump(fresh, query) == dump(upgraded, query)
    indexes = {row[1] for row in dump(fresh, query) if row[0] == "index"}
    assert {
        "jobchain_job_acquisition_idx",
        "jobchain_job_chain_index_idx",
        "jobchain_job_deduplication_idx",
        "jobchain_job_expired_lease_idx",
        "jobchain_job_blocker_chain_idx",
        "jobchain_job_chain_listing_idx",
        "jobchain_job_listing_idx",
        "jobchain_job_listing_type_name_idx",
        "jobchain_job_chain_listing_type_name_idx",
        "jobchain_job_failed_idx",
        "jobchain_job_cancelled_idx",
    } <= indexes
    # The rebuilt tables reference each other under their final names.
    references = dump(fresh, "PRAGMA foreign_key_list(jobchain_job_blocker)")
    assert {row[2] for row in references} == {"jobchain_job"}
    assert {row[2] for row in dump(fresh, "PRAGMA foreign_key_list(jobchain_job)")} == {"jobchain_job"}


async def test_a_database_without_the_lifecycle_migration_raises_schema_not_migrated(tmp_path: Path) -> None:
    path = tmp_path / "partly.db"
    migrate_to(path, "0004_worker_registry")
    adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
    try:
        with pytest.raises(
            CoreSchemaNotMigratedError,
            match=r"0005_job_lifecycle, 0006_queue_stats, 0007_scheduling, 0008_session_revocations,"
            r" 0009_worker_incarnation, 0010_worker_load, 0011_end_hooks not applied.*jobchain migrate",
        ):
            async with adapter.transaction() as tx:
                await tx.jobs_list(JobsList())
    finally:
        await adapter.close()


async def test_the_new_statuses_and_flags_are_checked_by_the_database(tmp_path: Path) -> None:
    path = tmp_path / "db.db"
    adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
    await adapter.migrate()
    job = NewJob(id=new_id(), type_name="t", chain_type_name="t")
    async with adapter.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[job]))
    await adapter.close()
    with sqlite3.connect(path) as conn:
        for status in ("failed", "cancelled"):
            conn.execute("UPDATE jobchain_job SET status = ? WHERE id = ?", (status, job.id))
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute("UPDATE jobchain_job SET status = 'exploded' WHERE id = ?", (job.id,))
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute("UPDATE jobchain_job SET runs_after_failed_blockers = 2 WHERE id = ?", (job.id,))
    conn.close()


async def test_the_old_adapter_statements_still_read_the_seed(tmp_path: Path) -> None:
    """The seed itself is sound: the 0004 library's own reads accept it (guards the fixture)."""
    path = tmp_path / "old.db"
    ids = await seed_0004(path)
    assert dump(path, "SELECT COUNT(*) FROM jobchain_job") == [(5,)]
    assert dump(path, f"SELECT status FROM jobchain_job WHERE id = '{ids['blocked']}'") == [("blocked",)]


async def test_completing_after_the_upgrade_unblocks_as_before(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    ids = await seed_0004(path)
    adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
    try:
        await adapter.migrate()
        async with adapter.transaction() as tx:
            done = await tx.job_complete(JobComplete(job_id=ids["running"], worker_id="w1", output=1))
            blocked = await tx.job_get(JobGet(job_id=ids["blocked"]))
            await tx.worker_heartbeat(
                WorkerHeartbeat(
                    worker_id="w2",
                    name="n",
                    host="h",
                    pid=2,
                    version="v",
                    type_names=["t"],
                    concurrency=1,
                    inflight=0,
                    state=WorkerState.RUNNING,
                    alive_for=LEASE,
                )
            )
        assert [job.id for job in done.unblocked_jobs] == [ids["blocked"]]
        assert blocked is not None
        assert blocked.status is JobStatus.PENDING
    finally:
        await adapter.close()
