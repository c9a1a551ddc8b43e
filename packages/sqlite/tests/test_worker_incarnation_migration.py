"""Migration 0009_worker_incarnation (issue 35, deliver 3) on a 0008 database holding worker
rows and jobs: every row kept (incarnation 0), the same schema as a fresh database, and the
fence working on the old rows: the row a live worker marked dead stays dead for a heartbeat of
incarnation 0, and a rejoin under incarnation 1 brings it back."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from jobchain.contracts import JobComplete, JobsAcquire, WorkerHeartbeat, WorkersList
from jobchain.entities import WorkerState, new_id
from jobchain_sqlite import SqliteOptions, SqliteStateAdapter
from jobchain_sqlite.queries import MIGRATIONS, migration_statements, queries

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
OLD = "2029-12-31T00:00:00.000000Z"
ALIVE_UNTIL = "2030-01-01T12:10:00.000000Z"
SCHEMA = "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name LIKE 'jobchain_%' ORDER BY name"
TABLES = ("job", "job_blocker", "ordering_key", "type_control", "schedule", "session_revocation")
WORKER_COLUMNS = (
    "id, name, host, pid, version, type_names, concurrency, inflight, state,"
    " started_at, last_seen_at, alive_until"
)


def _dump(path: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(sql).fetchall()
    conn.close()
    return rows


def _seed_0008(path: Path) -> dict[str, str]:
    """A database migrated by the 0008 version: a running worker holding a running job, a worker
    marked dead, a stopped one, and a pending job, as that version wrote them."""
    q = queries("jobchain_")
    ids = {"pending": new_id(), "running": new_id()}
    with sqlite3.connect(path) as conn:
        conn.execute(q.migration_table_create)
        for name in MIGRATIONS[: MIGRATIONS.index("0008_session_revocations") + 1]:
            for statement in migration_statements(name, "jobchain_"):
                conn.execute(statement)
            conn.execute(q.migration_record, {"name": name, "applied_at": OLD})
        insert = (
            "INSERT INTO jobchain_job (id, type_name, chain_id, chain_type_name, chain_index, status,"
            " created_at, scheduled_at, leased_by, leased_until, lease_generation, attempt, priority)"
            " VALUES (?, 't', ?, 't', 0, ?, ?, ?, ?, ?, ?, ?, 0)"
        )
        conn.execute(insert, (ids["pending"], ids["pending"], "pending", OLD, OLD, None, None, 0, 0))
        lease = "2030-01-01T12:05:00.000000Z"
        conn.execute(insert, (ids["running"], ids["running"], "running", OLD, OLD, "live", lease, 1, 1))
        for worker_id, state in (("live", "running"), ("ghost", "dead"), ("gone", "stopped")):
            conn.execute(
                f"INSERT INTO jobchain_worker ({WORKER_COLUMNS})"
                " VALUES (?, ?, 'host', 7, '1.0', '[\"t\"]', 2, 1, ?, ?, ?, ?)",
                (worker_id, f"name-{worker_id}", state, OLD, OLD, ALIVE_UNTIL),
            )
    conn.close()
    return ids


def _rows(path: Path) -> dict[str, list[tuple[object, ...]]]:
    rows = {table: _dump(path, f"SELECT * FROM jobchain_{table} ORDER BY 1") for table in TABLES}
    rows["worker"] = _dump(path, f"SELECT {WORKER_COLUMNS} FROM jobchain_worker ORDER BY 1")
    return rows


def beat(worker_id: str, now: datetime, incarnation: int) -> WorkerHeartbeat:
    return WorkerHeartbeat(
        worker_id=worker_id,
        name=f"name-{worker_id}",
        host="host",
        pid=7,
        version="1.0",
        type_names=["t"],
        concurrency=2,
        inflight=0,
        state=WorkerState.RUNNING,
        alive_for=timedelta(minutes=10),
        incarnation=incarnation,
        now=now,
    )


async def test_upgrade_from_0008_keeps_the_rows_and_fences_heartbeats(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    ids = _seed_0008(path)
    before = _rows(path)
    assert (len(before["job"]), len(before["worker"])) == (2, 3)
    adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
    try:
        await adapter.migrate()
        assert _rows(path) == before
        assert _dump(path, "SELECT id, incarnation FROM jobchain_worker ORDER BY id") == [
            ("ghost", 0),
            ("gone", 0),
            ("live", 0),
        ]
        assert ("0009_worker_incarnation",) in _dump(path, "SELECT name FROM jobchain_migration")
        assert _dump(path, "PRAGMA integrity_check") == [("ok",)]
        async with adapter.transaction() as tx:
            # The worker marked dead by the old version: its incarnation-0 heartbeat is fenced.
            fenced = await tx.worker_heartbeat(beat("ghost", T0, 0))
            assert (fenced.was_dead, fenced.released_jobs) == (True, [])
            # The live one goes on as before, and rejoining under a higher incarnation works.
            assert (await tx.worker_heartbeat(beat("live", T0, 0))).was_dead is False
            assert (await tx.worker_heartbeat(beat("ghost", T0, 1))).was_dead is False
            states = {row.id: row.state for row in await tx.workers_list(WorkersList(now=T0))}
            assert states == {
                "live": WorkerState.RUNNING,
                "ghost": WorkerState.RUNNING,
                "gone": WorkerState.STOPPED,
            }
            # The old jobs still work: the running job completes, the pending one is claimed.
            await tx.job_complete(JobComplete(job_id=ids["running"], worker_id="live", now=T0))
            claimed = await tx.jobs_acquire(
                JobsAcquire(type_names=["t"], worker_id="live", lease_for=timedelta(minutes=5), now=T0)
            )
            assert [job.id for job in claimed.jobs] == [ids["pending"]]
        assert _dump(path, "SELECT id, incarnation FROM jobchain_worker ORDER BY id") == [
            ("ghost", 1),
            ("gone", 0),
            ("live", 0),
        ]
    finally:
        await adapter.close()


async def test_a_fresh_database_and_one_upgraded_from_0008_have_the_same_schema(tmp_path: Path) -> None:
    fresh, upgraded = tmp_path / "fresh.db", tmp_path / "upgraded.db"
    _seed_0008(upgraded)
    for path in (fresh, upgraded):
        adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
        await adapter.migrate()
        await adapter.close()
    assert _dump(fresh, SCHEMA) == _dump(upgraded, SCHEMA)
    columns = {row[1]: row for row in _dump(fresh, "PRAGMA table_info(jobchain_worker)")}
    assert columns["incarnation"][2:5] == ("INTEGER", 1, "0")  # type, NOT NULL, default


async def test_the_largest_incarnation_is_stored_and_fences(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
    try:
        await adapter.migrate()
        async with adapter.transaction() as tx:
            assert (await tx.worker_heartbeat(beat("w", T0, 2**63 - 1))).was_dead is False
            assert (await tx.worker_heartbeat(beat("w", T0, 2**63 - 2))).was_dead is True
        assert _dump(path, "SELECT incarnation FROM jobchain_worker") == [(2**63 - 1,)]
    finally:
        await adapter.close()
