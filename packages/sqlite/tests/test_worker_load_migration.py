"""Migration 0010_worker_load (issue 36, deliver 3: a worker's load, labelled) on a 0009
database holding worker rows: every row kept, each reading ``buffered`` and ``capacity`` 0 (not
reported by the older worker), the same schema as a fresh database; the next heartbeat stores
them as reported."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from jobchain.contracts import WorkersList
from jobchain_sqlite import SqliteOptions, SqliteStateAdapter
from jobchain_sqlite.queries import MIGRATIONS, migration_statements, queries

from .test_worker_incarnation_migration import (
    ALIVE_UNTIL,
    OLD,
    SCHEMA,
    T0,
    WORKER_COLUMNS,
    _dump,
)
from .test_worker_incarnation_migration import beat as incarnation_beat


def _seed_0009(path: Path) -> None:
    q = queries("jobchain_")
    with sqlite3.connect(path) as conn:
        conn.execute(q.migration_table_create)
        for name in MIGRATIONS[: MIGRATIONS.index("0009_worker_incarnation") + 1]:
            for statement in migration_statements(name, "jobchain_"):
                conn.execute(statement)
            conn.execute(q.migration_record, {"name": name, "applied_at": OLD})
        for worker_id, state in (("live", "running"), ("gone", "stopped")):
            conn.execute(
                f"INSERT INTO jobchain_worker ({WORKER_COLUMNS}, incarnation)"
                " VALUES (?, ?, 'host', 7, '1.0', '[\"t\"]', 2, 1, ?, ?, ?, ?, 0)",
                (worker_id, f"name-{worker_id}", state, OLD, OLD, ALIVE_UNTIL),
            )
    conn.close()


async def test_upgrade_from_0009_keeps_the_worker_rows_with_an_unreported_load(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _seed_0009(path)
    before = _dump(path, f"SELECT {WORKER_COLUMNS}, incarnation FROM jobchain_worker ORDER BY id")
    adapter = SqliteStateAdapter(SqliteOptions(path=str(path)))
    try:
        await adapter.migrate()
        after = _dump(path, f"SELECT {WORKER_COLUMNS}, incarnation FROM jobchain_worker ORDER BY id")
        assert after == before
        assert ("0010_worker_load",) in _dump(path, "SELECT name FROM jobchain_migration")
        async with adapter.transaction(read_only=True) as tx:
            rows = await tx.workers_list(WorkersList(now=T0))
        assert sorted((r.id, r.inflight, r.buffered, r.capacity) for r in rows) == [
            ("gone", 1, 0, 0),
            ("live", 1, 0, 0),
        ]
        async with adapter.transaction() as tx:
            await tx.worker_heartbeat(
                replace(incarnation_beat("live", T0, 0), inflight=5, buffered=2, capacity=6)
            )
            rows = await tx.workers_list(WorkersList(now=T0 + timedelta(seconds=1)))
        [live] = [r for r in rows if r.id == "live"]
        assert (live.inflight, live.buffered, live.capacity, live.running) == (5, 2, 6, 3)
    finally:
        await adapter.close()
    fresh = tmp_path / "fresh.db"
    adapter = SqliteStateAdapter(SqliteOptions(path=str(fresh)))
    try:
        await adapter.migrate()
    finally:
        await adapter.close()
    assert _dump(path, SCHEMA) == _dump(fresh, SCHEMA)
