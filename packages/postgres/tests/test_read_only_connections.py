"""A pooled connection handed back still read-only (its read-only transaction was cancelled
while it ended, before the reset ran) must not make the next write transaction fail: every
write transaction sets what it needs. Found under load in CI: a worker's atomic attempts failed
with "cannot execute SELECT FOR KEY SHARE in a read-only transaction" and ran twice."""

from __future__ import annotations

from datetime import UTC, datetime

from jobchain.contracts import JobGet, JobsCreate, NewJob
from jobchain.entities import new_id
from jobchain_postgres import PostgresStateAdapter, StateOptions


async def test_a_write_transaction_on_a_connection_left_read_only_succeeds(
    postgres_url: str, schema_name: str
) -> None:
    adapter = await PostgresStateAdapter.open(
        postgres_url, StateOptions(schema=schema_name, pool_min_size=1, pool_max_size=1)
    )
    try:
        await adapter.migrate()
        pool = adapter._provider.pool  # type: ignore[attr-defined]  # the adapter's own pool
        async with pool.connection() as connection:
            # What a cancelled read-only transaction leaves behind on the pool's only connection.
            await connection.set_read_only(True)
        job_id = new_id()
        async with adapter.transaction() as tx:
            await tx.jobs_create(
                JobsCreate(
                    jobs=[NewJob(id=job_id, type_name="t", chain_type_name="t")],
                    now=datetime.now(UTC),
                )
            )
        async with adapter.transaction(read_only=True) as tx:
            assert (await tx.job_get(JobGet(job_id=job_id))) is not None
    finally:
        await adapter.close()
