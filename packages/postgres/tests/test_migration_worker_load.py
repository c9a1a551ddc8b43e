"""Migration 0012 (issue 36, deliver 3: a worker's load, labelled): a database at 0011 holding
worker rows upgrades with every row intact, each reading ``buffered`` and ``capacity`` 0 (not
reported by the older worker); the next heartbeat stores them as reported."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from jobchain.contracts import WorkersList
from jobchain_postgres.queries import migration_names

from .conftest import open_state
from .test_migration_session_revocations import _migrate_to
from .test_migration_worker_incarnation import NOW, _rows, _seed_workers, beat
from .test_migrations import ledger


async def test_a_database_at_0011_upgrades_its_worker_rows_to_an_unreported_load(
    postgres_url: str, schema_name: str
) -> None:
    _migrate_to(postgres_url, schema_name, "0011_worker_incarnation")
    _seed_workers(postgres_url, schema_name)
    before = _rows(postgres_url, schema_name)

    adapter = await open_state(postgres_url, schema_name)  # applies 0012
    try:
        assert ledger(postgres_url, schema_name) == migration_names()
        assert "0012_worker_load" in migration_names()
        assert _rows(postgres_url, schema_name) == before
        async with adapter.transaction(read_only=True) as tx:
            rows = await tx.workers_list(WorkersList(now=NOW))
        assert sorted((r.id, r.inflight, r.buffered, r.capacity) for r in rows) == [
            ("ghost", 1, 0, 0),
            ("gone", 1, 0, 0),
            ("live", 1, 0, 0),
        ]
        async with adapter.transaction() as tx:
            await tx.worker_heartbeat(replace(beat("live", 0), inflight=5, buffered=2, capacity=6))
            rows = await tx.workers_list(WorkersList(now=NOW + timedelta(seconds=1)))
        [live] = [r for r in rows if r.id == "live"]
        assert (live.inflight, live.buffered, live.capacity, live.running) == (5, 2, 6, 3)
    finally:
        await adapter.close()
