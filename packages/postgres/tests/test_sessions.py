"""Session settings: the adapter's own pool runs in UTC (timestamps need no conversion when read),
and ids load as text on the adapter's cursors without touching your connection's adapters."""

from __future__ import annotations

import uuid
from datetime import UTC

import psycopg
from psycopg.conninfo import conninfo_to_dict

from jobchain.contracts import JobGet, JobsCreate, NewJob
from jobchain.entities import new_id
from jobchain_postgres import PostgresStateAdapter, StateOptions
from jobchain_postgres.state import utc_session

from .conftest import conninfo


async def test_own_pool_sessions_are_utc(pg_state: PostgresStateAdapter) -> None:
    job = NewJob(id=new_id(), type_name="t", chain_type_name="t")
    async with pg_state.transaction() as tx:
        assert tx.connection.info.parameter_status("TimeZone") == "UTC"
        await tx.jobs_create(JobsCreate(jobs=[job]))
        stored = await tx.job_get(JobGet(job_id=job.id))
    assert stored is not None
    assert stored.created_at.tzinfo is UTC
    assert stored.scheduled_at.tzinfo is UTC


def test_other_options_are_kept_and_an_explicit_time_zone_wins() -> None:
    merged = conninfo_to_dict(utc_session("host=db options='-c statement_timeout=5s'"))
    assert merged["options"] == "-c statement_timeout=5s -c TimeZone=UTC"
    assert merged["host"] == "db"
    assert conninfo_to_dict(utc_session("host=db"))["options"] == "-c TimeZone=UTC"
    explicit = "host=db options='-c timezone=Europe/Paris'"
    assert utc_session(explicit) == explicit


async def test_ids_read_as_text_leave_your_connections_uuid_loading_alone(
    postgres_url: str, schema_name: str
) -> None:
    connection = await psycopg.AsyncConnection.connect(conninfo(postgres_url), autocommit=True)
    adapter = PostgresStateAdapter.from_connection(connection, StateOptions(schema=schema_name))
    try:
        await adapter.migrate()
        job = NewJob(id=new_id(), type_name="t", chain_type_name="t")
        async with adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[job]))
            stored = await tx.job_get(JobGet(job_id=job.id))
        assert stored is not None
        assert type(stored.id) is str
        assert stored.id == stored.chain_id == job.id
        # Your own queries on the same connection still get uuid.UUID values.
        cursor = await connection.execute("SELECT gen_random_uuid()")
        row = await cursor.fetchone()
        assert row is not None
        assert isinstance(row[0], uuid.UUID)
    finally:
        await adapter.close()
        await connection.close()
