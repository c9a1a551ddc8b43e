"""Migration 0011 (issue 35, deliver 3: fenced heartbeats): a database at 0010 holding worker
rows (running, marked dead, stopped) and jobs upgrades with every row intact, each worker at
incarnation 0; the fence then works on those rows (the dead one stays dead for a heartbeat of
incarnation 0, a rejoin under 1 brings it back) and the old jobs still complete and claim."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from jobchain.contracts import JobComplete, JobsAcquire, JobsCreate, NewJob, WorkerHeartbeat, WorkersList
from jobchain.entities import WorkerState, new_id
from jobchain_postgres import PostgresStateAdapter, StateOptions
from jobchain_postgres.queries import migration_names

from .conftest import conninfo, open_state
from .test_migration_session_revocations import _migrate_to
from .test_migrations import ledger

NOW = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=30)
TABLES = ("job", "job_blocker", "ordering_key", "type_control", "schedule", "session_revocation")
WORKER_COLUMNS = (
    "id", "name", "host", "pid", "version", "type_names", "concurrency", "inflight", "state",
    "started_at", "last_seen_at", "alive_until",
)  # fmt: skip


def _table(schema: str, name: str) -> sql.Identifier:
    return sql.Identifier(schema, f"jobchain_{name}")


def _rows(url: str, schema: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(conninfo(url)) as connection:
        rows = {
            table: connection.execute(
                sql.SQL("SELECT * FROM {} ORDER BY 1").format(_table(schema, table))
            ).fetchall()
            for table in TABLES
        }
        columns = sql.SQL(", ").join(map(sql.Identifier, WORKER_COLUMNS))
        rows["worker"] = connection.execute(
            sql.SQL("SELECT {} FROM {} ORDER BY 1").format(columns, _table(schema, "worker"))
        ).fetchall()
        return rows


def _incarnations(url: str, schema: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(conninfo(url)) as connection:
        return connection.execute(
            sql.SQL("SELECT id, incarnation FROM {} ORDER BY id").format(_table(schema, "worker"))
        ).fetchall()


def _seed_workers(url: str, schema: str) -> None:
    """Worker rows as the 0010 version wrote them (its heartbeat knew no incarnation)."""
    insert = sql.SQL(
        "INSERT INTO {} (id, name, host, pid, version, type_names, concurrency, inflight, state,"
        " started_at, last_seen_at, alive_until)"
        " VALUES (%s, %s, 'host', 7, '1.0', ARRAY['t'], 2, 1, %s, %s, %s, %s)"
    ).format(_table(schema, "worker"))
    with psycopg.connect(conninfo(url)) as connection:
        for worker_id, state in (("live", "running"), ("ghost", "dead"), ("gone", "stopped")):
            connection.execute(
                insert, (worker_id, f"name-{worker_id}", state, NOW, NOW, NOW + timedelta(minutes=10))
            )


def beat(worker_id: str, incarnation: int) -> WorkerHeartbeat:
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
        now=NOW,
    )


async def test_a_database_at_0010_upgrades_with_its_rows_and_fences_heartbeats(
    postgres_url: str, schema_name: str
) -> None:
    _migrate_to(postgres_url, schema_name, "0010_session_revocations")
    old = await PostgresStateAdapter.open(postgres_url, StateOptions(schema=schema_name, pool_min_size=0))
    jobs = [NewJob(id=new_id(), type_name="t", chain_type_name="t") for _ in range(2)]
    try:
        async with old.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=jobs, now=NOW))
            claimed = await tx.jobs_acquire(
                JobsAcquire(type_names=["t"], worker_id="live", lease_for=LEASE, limit=1, now=NOW)
            )
    finally:
        await old.close()
    _seed_workers(postgres_url, schema_name)
    before = _rows(postgres_url, schema_name)
    assert (len(before["job"]), len(before["worker"])) == (2, 3)

    adapter = await open_state(postgres_url, schema_name)  # applies 0011
    try:
        assert ledger(postgres_url, schema_name) == migration_names()
        assert "0011_worker_incarnation" in migration_names()
        assert _rows(postgres_url, schema_name) == before
        assert _incarnations(postgres_url, schema_name) == [("ghost", 0), ("gone", 0), ("live", 0)]
        async with adapter.transaction() as tx:
            # The worker marked dead by the old version: its incarnation-0 heartbeat is fenced.
            fenced = await tx.worker_heartbeat(beat("ghost", 0))
            assert (fenced.was_dead, fenced.released_jobs) == (True, [])
            # The live one goes on as before; rejoining under a higher incarnation works.
            assert (await tx.worker_heartbeat(beat("live", 0))).was_dead is False
            assert (await tx.worker_heartbeat(beat("ghost", 1))).was_dead is False
            states = {row.id: row.state for row in await tx.workers_list(WorkersList(now=NOW))}
            assert states == {
                "live": WorkerState.RUNNING,
                "ghost": WorkerState.RUNNING,
                "gone": WorkerState.STOPPED,
            }
            # The old jobs keep working: the running one completes, the pending one is claimed.
            await tx.job_complete(JobComplete(job_id=claimed.jobs[0].id, worker_id="live", now=NOW))
            more = await tx.jobs_acquire(
                JobsAcquire(type_names=["t"], worker_id="live", lease_for=LEASE, limit=5, now=NOW)
            )
            # Two jobs of one moment: which the first claim took is the id order, not the list's.
            assert [job.id for job in more.jobs] == [j.id for j in jobs[:2] if j.id != claimed.jobs[0].id]
        assert _incarnations(postgres_url, schema_name) == [("ghost", 1), ("gone", 0), ("live", 0)]
    finally:
        await adapter.close()


async def test_the_largest_incarnation_is_stored_and_fences(postgres_url: str, schema_name: str) -> None:
    adapter = await open_state(postgres_url, schema_name)
    try:
        async with adapter.transaction() as tx:
            assert (await tx.worker_heartbeat(beat("w", 2**63 - 1))).was_dead is False
            assert (await tx.worker_heartbeat(beat("w", 2**63 - 2))).was_dead is True
        assert _incarnations(postgres_url, schema_name) == [("w", 2**63 - 1)]
    finally:
        await adapter.close()
