"""``autocommit()``: each operation is its own transaction, with no BEGIN or COMMIT round trip.

Seen from another session, what an operation wrote is there as soon as it returns, and the
connection holds no open transaction. On a connection that is not in autocommit mode it is an
ordinary transaction instead (nothing visible before the block ends, rolled back on error).
"""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from psycopg.pq import TransactionStatus

from jobchain.contracts import JobComplete, JobsAcquire, JobsCreate, NewJob, RunsOperationsAlone
from jobchain.entities import new_id
from jobchain.errors import InvalidArgumentError
from jobchain_postgres import PostgresStateAdapter, StateOptions

from .conftest import conninfo


def _root() -> NewJob:
    return NewJob(id=new_id(), type_name="t", chain_type_name="t")


async def _seen_elsewhere(postgres_url: str, schema: str, job_id: str) -> str | None:
    """The job's status as a separate session sees it (None: not there)."""
    async with await psycopg.AsyncConnection.connect(conninfo(postgres_url), autocommit=True) as other:
        query = f'SELECT status::text FROM "{schema}".jobchain_job WHERE id = %s'
        cursor = await other.execute(query.encode(), [job_id])
        row = await cursor.fetchone()
    return None if row is None else str(row[0])


async def test_the_adapter_offers_autocommit(pg_state: PostgresStateAdapter) -> None:
    assert isinstance(pg_state, RunsOperationsAlone)


async def test_each_operation_is_committed_when_it_returns(
    pg_state: PostgresStateAdapter, postgres_url: str, schema_name: str
) -> None:
    job = _root()
    async with pg_state.autocommit() as tx:
        await tx.jobs_create(JobsCreate(jobs=[job]))
        assert tx.connection.info.transaction_status == TransactionStatus.IDLE
        assert await _seen_elsewhere(postgres_url, schema_name, job.id) == "pending"
        acquired = await tx.jobs_acquire(
            JobsAcquire(type_names=["t"], worker_id="w", lease_for=timedelta(seconds=30), limit=5)
        )
        assert [j.id for j in acquired.jobs] == [job.id]
        assert await _seen_elsewhere(postgres_url, schema_name, job.id) == "running"
        [done] = await tx.jobs_complete(
            [JobComplete(job_id=job.id, output={"ok": True}, worker_id="w", lease_generation=1)]
        )
        assert not isinstance(done, Exception)
        assert await _seen_elsewhere(postgres_url, schema_name, job.id) == "completed"


async def test_autocommit_refuses_savepoints(pg_state: PostgresStateAdapter) -> None:
    async with pg_state.autocommit() as tx:
        with pytest.raises(InvalidArgumentError, match="savepoints need a transaction"):
            tx.savepoint()


async def test_a_read_only_autocommit_refuses_writes(pg_state: PostgresStateAdapter) -> None:
    async with pg_state.autocommit(read_only=True) as tx:
        with pytest.raises(InvalidArgumentError, match="read-only"):
            await tx.jobs_create(JobsCreate(jobs=[_root()]))


async def test_on_a_connection_not_in_autocommit_mode_it_is_an_ordinary_transaction(
    postgres_url: str, schema_name: str
) -> None:
    connection = await psycopg.AsyncConnection.connect(conninfo(postgres_url), autocommit=False)
    adapter = PostgresStateAdapter.from_connection(connection, StateOptions(schema=schema_name))
    try:
        await adapter.migrate()
        await connection.commit()
        kept, dropped = _root(), _root()
        async with adapter.autocommit() as tx:
            await tx.jobs_create(JobsCreate(jobs=[kept]))
            assert await _seen_elsewhere(postgres_url, schema_name, kept.id) is None
        assert await _seen_elsewhere(postgres_url, schema_name, kept.id) == "pending"

        async def create_then_fail() -> None:
            async with adapter.autocommit() as tx:
                await tx.jobs_create(JobsCreate(jobs=[dropped]))
                raise RuntimeError("rolls back")

        with pytest.raises(RuntimeError):
            await create_then_fail()
        assert await _seen_elsewhere(postgres_url, schema_name, dropped.id) is None
    finally:
        await adapter.close()
        await connection.close()
