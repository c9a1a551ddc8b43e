"""Migrations: idempotent, safe when processes start at once, equal to the documented schema.sql;
and the hot queries use their partial indexes (EXPLAIN, never timings)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from jobchain.contracts import JobsAcquire, JobsCreate, JobsList, NewJob
from jobchain.entities import Deduplication, new_id
from jobchain_postgres import PostgresStateAdapter, SchemaNotMigratedError, StateOptions
from jobchain_postgres.queries import Queries, migration, migration_names, schema_sql
from jobchain_postgres.rows import new_jobs_document

from .conftest import conninfo, open_state, with_query

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def ledger(url: str, schema: str, prefix: str = "jobchain_") -> list[str]:
    with psycopg.connect(conninfo(url)) as connection:
        rows = connection.execute(
            sql.SQL("SELECT name FROM {} ORDER BY name").format(sql.Identifier(schema, f"{prefix}migration"))
        ).fetchall()
    return [row[0] for row in rows]


async def test_migrate_twice_applies_each_migration_once(postgres_url: str, schema_name: str) -> None:
    adapter = await open_state(postgres_url, schema_name)
    try:
        await adapter.migrate()
    finally:
        await adapter.close()
    assert ledger(postgres_url, schema_name) == migration_names()


async def test_processes_migrating_at_once_apply_each_migration_once(
    postgres_url: str, schema_name: str
) -> None:
    adapters = [
        await PostgresStateAdapter.open(postgres_url, StateOptions(schema=schema_name, pool_min_size=0))
        for _ in range(4)
    ]
    try:
        await asyncio.wait_for(asyncio.gather(*(a.migrate() for a in adapters)), 30)
    finally:
        for adapter in adapters:
            await adapter.close()
    assert ledger(postgres_url, schema_name) == migration_names()


async def test_unmigrated_schema_raises_an_error_that_says_to_migrate(
    postgres_url: str, schema_name: str
) -> None:
    adapter = await PostgresStateAdapter.open(postgres_url, StateOptions(schema=schema_name, pool_min_size=0))
    try:
        with pytest.raises(SchemaNotMigratedError, match="jobchain migrate"):
            async with adapter.transaction() as tx:
                await tx.jobs_create(JobsCreate(jobs=[new_job()], now=NOW))
    finally:
        await adapter.close()


async def test_two_prefixes_share_one_schema(postgres_url: str, schema_name: str) -> None:
    first = await open_state(postgres_url, schema_name)
    second = await PostgresStateAdapter.open(
        postgres_url, StateOptions(schema=schema_name, table_prefix="other_", pool_min_size=0)
    )
    try:
        await second.migrate()
        async with first.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[new_job()], now=NOW))
        async with second.transaction() as tx:
            assert (await tx.jobs_list(JobsList())).items == []
    finally:
        await first.close()
        await second.close()
    assert ledger(postgres_url, schema_name, "other_") == migration_names()


async def test_a_schema_from_earlier_migrations_upgrades_and_keeps_its_jobs(
    postgres_url: str, schema_name: str
) -> None:
    # A schema migrated (and used) by a version that knew only the migrations before 0003.
    queries = Queries(schema_name, "jobchain_")
    earlier = [name for name in migration_names() if name < "0003"]
    old_id = new_id()
    with psycopg.connect(conninfo(postgres_url), autocommit=True) as connection:
        connection.execute(queries.migration_bootstrap)
        for name in earlier:
            connection.execute(migration(name, schema_name, "jobchain_"))
            connection.execute(queries.migration_record, {"name": name})
        connection.execute(
            sql.SQL(
                "INSERT INTO {} (id, chain_id, type_name, chain_type_name, chain_index, status,"
                " created_at, scheduled_at) VALUES (%(id)s, %(id)s, 't', 't', 0, 'pending', %(at)s, %(at)s)"
            ).format(sql.Identifier(schema_name, "jobchain_job")),
            {"id": old_id, "at": NOW},
        )
    adapter = await PostgresStateAdapter.open(postgres_url, StateOptions(schema=schema_name, pool_min_size=0))
    try:
        await adapter.migrate()
        async with adapter.transaction() as tx:
            [before] = (await tx.jobs_list(JobsList())).items
            claimed = await tx.jobs_acquire(
                JobsAcquire(type_names=["t"], worker_id="w", lease_for=timedelta(seconds=30), now=NOW)
            )
    finally:
        await adapter.close()
    assert (before.id, before.first_attempt_at, before.attempt_started_at) == (old_id, None, None)
    [job] = claimed.jobs
    assert (job.first_attempt_at, job.attempt_started_at) == (NOW, NOW)
    assert ledger(postgres_url, schema_name) == migration_names()


async def test_deduplicated_chains_of_a_schema_before_0004_are_still_found_after_the_upgrade(
    postgres_url: str, schema_name: str
) -> None:
    # Chains started (with keys) by a version without the deduplication lock table: their keys
    # have no lock rows, and the first locked start of each key must still find them.
    earlier = [name for name in migration_names() if name < "0004"]
    old = NewJob(
        id=new_id(),
        type_name="t",
        chain_type_name="t",
        chain_id=None,
        chain_index=0,
        input={"old": True},
        deduplication=Deduplication(key="report-7"),
    )
    queries = Queries(schema_name, "jobchain_")
    with psycopg.connect(conninfo(postgres_url), autocommit=True) as connection:
        connection.execute(queries.migration_bootstrap)
        for name in earlier:
            connection.execute(migration(name, schema_name, "jobchain_"))
            connection.execute(queries.migration_record, {"name": name})
        # The 0003-era statement: jobs_create as it was, without taking any lock row.
        connection.execute(
            sql.SQL(
                "INSERT INTO {} (id, chain_id, type_name, chain_type_name, chain_index, status, input,"
                " created_at, scheduled_at, deduplication_key)"
                " VALUES (%(id)s, %(id)s, 't', 't', 0, 'pending', '{{\"old\": true}}', %(at)s, %(at)s,"
                " 'report-7')"
            ).format(sql.Identifier(schema_name, "jobchain_job")),
            {"id": old.id, "at": NOW},
        )
    adapter = await PostgresStateAdapter.open(postgres_url, StateOptions(schema=schema_name, pool_min_size=0))
    try:
        await adapter.migrate()
        again = NewJob(**{**_fields(old), "id": new_id(), "input": {"old": False}})
        async with adapter.transaction() as tx:
            [created] = await tx.jobs_create(JobsCreate(jobs=[again], now=NOW + timedelta(seconds=1)))
        async with adapter.transaction(read_only=True) as tx:
            roots = (await tx.jobs_list(JobsList())).items
            cursor = await tx.connection.execute(
                sql.SQL("SELECT chain_type_name, deduplication_key FROM {}").format(
                    sql.Identifier(schema_name, "jobchain_deduplication_lock")
                )
            )
            locks = await cursor.fetchall()
    finally:
        await adapter.close()
    assert (created.deduplicated, created.job.id, created.job.input) == (True, old.id, {"old": True})
    assert [job.id for job in roots] == [old.id]
    assert locks == [("t", "report-7")]
    assert ledger(postgres_url, schema_name) == migration_names()


def _fields(job: NewJob) -> dict[str, Any]:
    return {name: getattr(job, name) for name in NewJob.__dataclass_fields__}


# ---------------------------------------------------------------- schema.sql == migrations

_CATALOG = """
SELECT 'column', c.relname || '.' || a.attname,
       format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull || ' '
       || coalesce(pg_get_expr(d.adbin, d.adrelid), '') || ' #' || a.attnum
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE n.nspname = %(schema)s AND a.attnum > 0 AND NOT a.attisdropped AND c.relkind = 'r'
UNION ALL
SELECT 'constraint', c.relname || '.' || k.conname, pg_get_constraintdef(k.oid)
FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s
UNION ALL
SELECT 'index', i.indexname, i.indexdef FROM pg_indexes i WHERE i.schemaname = %(schema)s
UNION ALL
SELECT 'options', c.relname, array_to_string(c.reloptions, ',')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %(schema)s AND c.relkind = 'r'
UNION ALL
SELECT 'enum', t.typname, string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
FROM pg_type t JOIN pg_enum e ON e.enumtypid = t.oid JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE n.nspname = %(schema)s GROUP BY t.typname
UNION ALL
SELECT 'function', p.proname, pg_get_functiondef(p.oid)
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %(schema)s
UNION ALL
SELECT 'trigger', c.relname || '.' || t.tgname, pg_get_triggerdef(t.oid)
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND NOT t.tgisinternal
"""


def catalog(url: str, schema: str) -> list[tuple[str, str, str]]:
    with psycopg.connect(conninfo(url)) as connection:
        rows = connection.execute(_CATALOG, {"schema": schema}).fetchall()
    quoted = f'"{schema}".'
    return sorted(
        (kind, name, (definition or "").replace(quoted, "").replace(f"{schema}.", ""))
        for kind, name, definition in rows
    )


@pytest.fixture
def second_schema(postgres_url: str) -> Iterator[str]:
    name = f"jc_{uuid.uuid4().hex[:16]}"
    yield name
    with psycopg.connect(conninfo(postgres_url), autocommit=True) as connection:
        connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


async def test_schema_sql_equals_every_migration_applied(
    postgres_url: str, schema_name: str, second_schema: str
) -> None:
    adapter = await open_state(postgres_url, schema_name)
    await adapter.close()
    with psycopg.connect(conninfo(postgres_url), autocommit=True) as connection:
        connection.execute(schema_sql(second_schema, "jobchain_"))
    migrated, documented = catalog(postgres_url, schema_name), catalog(postgres_url, second_schema)
    assert migrated == documented
    kinds = {"column", "constraint", "index", "options", "enum", "function", "trigger"}
    assert {kind for kind, _, _ in migrated} == kinds


# ---------------------------------------------------------------- query plans


def new_job(type_name: str = "t", **fields: Any) -> NewJob:
    return NewJob(id=new_id(), type_name=type_name, chain_type_name=type_name, **fields)


async def plan(adapter: PostgresStateAdapter, query: bytes, params: dict[str, Any]) -> str:
    async with adapter.transaction() as tx:
        connection = tx.connection
        await connection.execute("SET LOCAL enable_seqscan = off")
        cursor = connection.cursor()
        await cursor.execute(b"EXPLAIN " + query, params, prepare=False)
        return "\n".join(row[0] for row in await cursor.fetchall())


@pytest.fixture
async def seeded(pg_state: PostgresStateAdapter) -> PostgresStateAdapter:
    jobs = [new_job(f"type{n % 5}", deduplication=Deduplication(key=f"k{n}")) for n in range(200)]
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=jobs, now=NOW))
        # Some running jobs with leases, as on a live queue, so the planner sees them.
        for n in range(5):
            await tx.jobs_acquire(
                JobsAcquire(
                    type_names=[f"type{n}"], worker_id="w", lease_for=timedelta(seconds=30), limit=10, now=NOW
                )
            )
        await tx.connection.execute(
            sql.SQL("ANALYZE {}").format(sql.Identifier(pg_state.options.schema, "jobchain_job"))
        )
    return pg_state


async def test_acquisition_uses_the_pending_partial_index(seeded: PostgresStateAdapter) -> None:
    q = Queries(seeded.options.schema, "jobchain_")
    params = {
        "type_names": ["type1", "type2"],
        "limit": 10,
        "worker_id": "w",
        "leases": [timedelta(seconds=30), timedelta(seconds=30)],
        "now": NOW,
        "aging": timedelta(minutes=1),
    }
    assert "jobchain_job_acquisition_idx" in await plan(seeded, q.jobs_acquire, params)
    assert "jobchain_job_acquisition_idx" in await plan(seeded, q.jobs_acquire_atomic, params)


async def test_next_available_uses_the_pending_partial_index(seeded: PostgresStateAdapter) -> None:
    q = Queries(seeded.options.schema, "jobchain_")
    text = await plan(seeded, q.job_next_available, {"type_names": ["type1"], "now": NOW})
    assert "jobchain_job_acquisition_idx" in text


async def test_reaping_uses_the_expired_lease_partial_index(seeded: PostgresStateAdapter) -> None:
    q = Queries(seeded.options.schema, "jobchain_")
    params = {"type_names": ["type1"], "exclude_job_ids": [], "limit": 1, "kept": 10, "now": NOW}
    assert "jobchain_job_expired_lease_idx" in await plan(seeded, q.jobs_reap_expired, params)
    assert "jobchain_job_expired_lease_idx" in await plan(seeded, q.jobs_reap_expired_atomic, params)


async def test_deduplication_lookup_uses_the_deduplication_partial_index(
    seeded: PostgresStateAdapter,
) -> None:
    q = Queries(seeded.options.schema, "jobchain_")
    document = new_jobs_document([new_job("type1", deduplication=Deduplication(key="k7"))])
    assert "jobchain_job_deduplication_idx" in await plan(
        seeded, q.jobs_create, {"jobs": document, "now": NOW}
    )


async def test_unblocking_uses_the_blocker_index(seeded: PostgresStateAdapter) -> None:
    q = Queries(seeded.options.schema, "jobchain_")
    params = {"job_id": new_id(), "worker_id": None, "lease_generation": None, "output": "null", "now": NOW}
    assert "jobchain_job_blocker_chain_idx" in await plan(seeded, q.job_complete, params)


def test_the_jobchain_migrate_command_migrates_the_schema(postgres_url: str, schema_name: str) -> None:
    from click.testing import CliRunner

    from jobchain.cli import main

    result = CliRunner().invoke(main, ["migrate", "--state", with_query(postgres_url, schema=schema_name)])
    assert result.exit_code == 0, result.output
    assert "PostgresStateAdapter" in result.output
    assert ledger(postgres_url, schema_name) == migration_names()


async def test_vacuum_runs_on_both_tables(pg_state: PostgresStateAdapter) -> None:
    async with pg_state.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[new_job() for _ in range(10)], now=NOW))
    await pg_state.vacuum()
    async with pg_state.transaction(read_only=True) as tx:
        cursor = await tx.connection.execute(
            "SELECT relname, vacuum_count + autovacuum_count FROM pg_stat_user_tables WHERE schemaname = %s",
            [pg_state.options.schema],
        )
        counts = dict(await cursor.fetchall())
    assert counts["jobchain_job"] >= 1
    assert counts["jobchain_job_blocker"] >= 1
