"""queue_stats and jobs_list(leased_by=) on PostgreSQL beyond the conformance suite: the plans
(EXPLAIN, never timings), JIT kept off for the statement and given back, and the upgrade that
adds job_stats_idx to a schema holding jobs."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from jobchain.contracts import (
    ChainsCancel,
    JobComplete,
    JobFail,
    JobsAcquire,
    JobsCreate,
    NewJob,
    QueueStatsGet,
)
from jobchain.entities import AttemptError, Schedule, new_id
from jobchain_postgres import PostgresStateAdapter, StateOptions
from jobchain_postgres._stats import _params
from jobchain_postgres.options import Claim
from jobchain_postgres.queries import Queries, migration, migration_names

from .conftest import conninfo, open_state, server_url
from .test_lifecycle_migration import _schema_at_0005
from .test_migrations import ledger, plan

NOW = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=30)
TYPES = [f"type{n}" for n in range(4)]


def _new(type_name: str, **fields: Any) -> NewJob:
    return NewJob(id=new_id(), type_name=type_name, chain_type_name=type_name, **fields)


async def _seed(adapter: PostgresStateAdapter) -> None:
    """Jobs of four types in every status: a live queue with a finished history."""
    jobs = [_new(TYPES[n % 4]) for n in range(160)]
    later = [_new(TYPES[n % 4], schedule=Schedule(at=NOW + timedelta(hours=1))) for n in range(8)]
    blocked = [_new(TYPES[n % 4], blocker_chain_ids=[later[n].id]) for n in range(8)]  # not due yet
    async with adapter.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=jobs + later + blocked, now=NOW))
        claimed = await tx.jobs_acquire(
            JobsAcquire(type_names=TYPES, worker_id="w", lease_for=LEASE, limit=120, now=NOW)
        )
        running = [job.id for job in claimed.jobs]
        for job_id in running[:80]:
            await tx.job_complete(JobComplete(job_id=job_id, worker_id="w", now=NOW + timedelta(seconds=5)))
        for n, job_id in enumerate(running[80:100]):
            error = AttemptError(attempt=1, worker_id="w", error_type=f"E{n % 3}", message="boom", at=NOW)
            await tx.job_fail(
                JobFail(job_id=job_id, error="boom", worker_id="w", attempt_error=error, now=NOW)
            )
        await tx.chains_cancel(ChainsCancel(chain_ids=running[100:110], now=NOW))
    # As autovacuum leaves a table: statistics, and the visibility map index-only scans rely on.
    async with await psycopg.AsyncConnection.connect(conninfo(server_url()), autocommit=True) as connection:
        await connection.execute(
            sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(adapter.options.schema, "jobchain_job"))
        )


@pytest.fixture
async def seeded(pg_state: PostgresStateAdapter) -> PostgresStateAdapter:
    await _seed(pg_state)
    return pg_state


def _job_scans(text: str) -> list[str]:
    """The plan's scan nodes on the job table (index name included)."""
    return [line.strip() for line in text.splitlines() if re.search(r"Scan.* on jobchain_job ", line)]


def _statement_plan_params(**arguments: Any) -> dict[str, Any]:
    return _params(QueueStatsGet(now=NOW + timedelta(minutes=1), **arguments))


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"type_names": ["type1", "unknown"]},
        {"throughput_window": timedelta(hours=1), "windows": [timedelta(hours=24)]},
    ],
    ids=["every-type", "named-types", "throughput"],
)
async def test_every_part_of_queue_stats_reads_an_index(
    seeded: PostgresStateAdapter, arguments: dict[str, Any]
) -> None:
    q = Queries(seeded.options.schema, "jobchain_")
    text = await plan(seeded, q.queue_stats, _statement_plan_params(**arguments))
    scans = _job_scans(text)
    assert scans, text
    assert not [scan for scan in scans if "Seq Scan" in scan], text
    for index in ("job_stats_idx", "job_finished_idx", "job_acquisition_idx", "job_expired_lease_idx"):
        assert f"jobchain_{index}" in text, (index, text)
    if "type_names" not in arguments:  # every type that has a job: the loose scan of the type index
        assert "jobchain_job_listing_type_name_idx" in text, text


@pytest.mark.parametrize(
    "arguments",
    [{}, {"throughput_window": timedelta(hours=1), "duration_sample": 10}],
    ids=["default", "throughput"],
)
async def test_every_index_queue_stats_reads_covers_what_it_reads(
    seeded: PostgresStateAdapter, arguments: dict[str, Any]
) -> None:
    # Index-only everywhere, failures by error type included (failed_error_type). The planner
    # picks index-only scans by how much of the table the visibility map marks all-visible,
    # which a transaction open elsewhere on the server can keep VACUUM from setting; so the
    # catalog says all of it is (in this transaction only, rolled back): what is left to decide
    # is whether each index covers what its part reads.
    q = Queries(seeded.options.schema, "jobchain_")
    table = f"{seeded.options.schema}.jobchain_job"
    async with (
        await psycopg.AsyncConnection.connect(conninfo(server_url())) as connection,
        connection.transaction(force_rollback=True),
    ):
        await connection.execute(
            "UPDATE pg_class SET relallvisible = relpages WHERE oid = %s::regclass", [table]
        )
        await connection.execute("SET LOCAL enable_seqscan = off")
        cursor = connection.cursor()
        await cursor.execute(b"EXPLAIN " + q.queue_stats, _statement_plan_params(**arguments), prepare=False)
        text = "\n".join(row[0] for row in await cursor.fetchall())
    scans = _job_scans(text)
    assert scans, text
    assert not [scan for scan in scans if "Index Only Scan" not in scan], text


async def test_leased_by_reads_the_status_index(seeded: PostgresStateAdapter) -> None:
    q = Queries(seeded.options.schema, "jobchain_")
    params = {
        "type_names": None,
        "chain_type_names": None,
        "chain_ids": None,
        "job_ids": None,
        "statuses": None,
        "rare_status": None,
        "error_types": None,
        "leased_by": ["w"],
        "created_from": None,
        "created_to": None,
        "after_at": None,
        "after_id": None,
        "limit": 51,
    }
    text = await plan(seeded, q.listing("jobs_list", "desc"), params)
    assert "Seq Scan on jobchain_job" not in text, text


async def test_queue_stats_gives_the_callers_jit_setting_back(
    seeded: PostgresStateAdapter, postgres_url: str
) -> None:
    async with await psycopg.AsyncConnection.connect(conninfo(postgres_url)) as connection:
        await connection.execute("SET jit = on")
        async with connection.transaction(), seeded.transaction(connection=connection) as tx:
            stats = await tx.queue_stats(QueueStatsGet(now=NOW))
            cursor = await connection.execute("SELECT current_setting('jit')")
            assert await cursor.fetchone() == ("on",)
    assert [item.type_name for item in stats.types] == TYPES


@pytest.mark.parametrize("claim", ["skip-locked", "atomic-update"])
async def test_queue_stats_runs_alone_in_autocommit(
    postgres_url: str, schema_name: str, claim: Claim
) -> None:
    adapter = await open_state(postgres_url, schema_name, claim)
    try:
        await _seed(adapter)
        async with adapter.autocommit(read_only=True) as tx:
            stats = await tx.queue_stats(QueueStatsGet(now=NOW + timedelta(minutes=1)))
    finally:
        await adapter.close()
    assert stats.total("completed") == 80
    assert (stats.total("failed"), stats.total("cancelled"), stats.total("blocked")) == (20, 10, 8)
    assert stats.total("running") == 10
    assert (stats.total("pending"), stats.due) == (40 + 8, 40)
    assert sum(item.expired_leases for item in stats.types) == 10
    failed = {name: n for item in stats.types for name, n in item.failed_by_error_type.items()}
    assert sorted(failed) == ["E0", "E1", "E2"]


async def test_a_schema_at_0005_with_jobs_upgrades_and_its_jobs_are_counted(
    postgres_url: str, schema_name: str
) -> None:
    ids = _schema_at_0005(postgres_url, schema_name)  # 0006 and 0007 then apply in one transaction
    adapter = await PostgresStateAdapter.open(postgres_url, StateOptions(schema=schema_name, pool_min_size=0))
    try:
        await adapter.migrate()
        async with adapter.transaction(read_only=True) as tx:
            stats = await tx.queue_stats(QueueStatsGet(now=NOW + timedelta(seconds=1)))
        async with adapter.transaction() as tx:
            await tx.job_fail(JobFail(job_id=ids["pending"], error="gave up", now=NOW + timedelta(seconds=2)))
        async with adapter.transaction(read_only=True) as tx:
            after = await tx.queue_stats(QueueStatsGet(now=NOW + timedelta(seconds=3)))
    finally:
        await adapter.close()
    [t] = stats.types
    assert (t.pending, t.running, t.completed, t.blocked, t.failed) == (1, 1, 1, 1, 0)
    assert (after.types[0].failed, dict(after.types[0].failed_by_error_type)) == (1, {"": 1})
    assert ledger(postgres_url, schema_name) == migration_names()


async def test_a_job_created_failed_counts_under_its_blockers_failure(pg_state: PostgresStateAdapter) -> None:
    blocker = _new("blocker")
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[blocker], now=NOW))
        await tx.job_fail(JobFail(job_id=blocker.id, error="boom", now=NOW))
        await tx.jobs_create(JobsCreate(jobs=[_new("late", blocker_chain_ids=[blocker.id])], now=NOW))
        stats = await tx.queue_stats(QueueStatsGet(now=NOW))
    assert dict(stats.get("late").failed_by_error_type) == {"BlockerChainFailed": 1}
    assert dict(stats.get("blocker").failed_by_error_type) == {"": 1}


async def test_failed_jobs_of_a_schema_at_0006_count_by_their_last_error_after_the_upgrade(
    postgres_url: str, schema_name: str
) -> None:
    queries = Queries(schema_name, "jobchain_")
    insert = sql.SQL(
        "INSERT INTO {} (id, chain_id, type_name, chain_type_name, chain_index, status, created_at,"
        " scheduled_at, failed_at, attempt_errors) VALUES (%(id)s, %(id)s, 't', 't', 0, %(status)s, %(at)s,"
        " %(at)s, %(failed_at)s, %(errors)s)"
    ).format(sql.Identifier(schema_name, "jobchain_job"))
    history = '[{"error_type": "KeyError"}, {"error_type": "TimeoutError"}]'
    rows = [
        ("failed", history),
        ("failed", None),
        ("failed", "[]"),
        ("pending", history),
        ("completed", None),
    ]
    with psycopg.connect(conninfo(postgres_url), autocommit=True) as connection:
        connection.execute(queries.migration_bootstrap)
        for name in [name for name in migration_names() if name < "0007"]:
            connection.execute(migration(name, schema_name, "jobchain_"))
            connection.execute(queries.migration_record, {"name": name})
        for status, errors in rows:
            failed_at = NOW if status == "failed" else None
            params = {"id": new_id(), "status": status, "at": NOW, "failed_at": failed_at, "errors": errors}
            connection.execute(insert, params)
    adapter = await PostgresStateAdapter.open(postgres_url, StateOptions(schema=schema_name, pool_min_size=0))
    try:
        await adapter.migrate()
        async with adapter.transaction(read_only=True) as tx:
            stats = await tx.queue_stats(QueueStatsGet(now=NOW))
    finally:
        await adapter.close()
    [t] = stats.types
    assert (t.failed, t.pending, t.completed) == (3, 1, 1)
    assert list(t.failed_by_error_type.items()) == [("", 2), ("TimeoutError", 1)]
