"""A worker's connections, reserved when it starts: the adapter's own pool grows to
concurrency + 4; a caller's pool is left alone, and a smaller one is named in one warning
(issue 16 finding 6)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest
from psycopg_pool import AsyncConnectionPool

from jobchain import Client, JobTypes
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.worker import Attempt, Completed, Processors, Worker
from jobchain.worker.connections import connections_needed
from jobchain_postgres import PostgresStateAdapter, StateOptions

from .conftest import conninfo


@dataclass
class Nothing:
    pass


types = JobTypes()
noop = types.define("pool.noop", input=Nothing, output=Nothing, entry=True)


def _processors() -> Processors:
    processors = Processors()

    @processors.handler(noop)
    async def handle(attempt: Attempt[Nothing, Nothing]) -> Completed:
        return await attempt.complete(Nothing())

    return processors


async def test_the_adapters_own_pool_grows_to_what_the_worker_needs(
    postgres_url: str, schema_name: str
) -> None:
    adapter = await PostgresStateAdapter.open(
        postgres_url, StateOptions(schema=schema_name, pool_min_size=0, pool_max_size=3)
    )
    try:
        await adapter.migrate()
        client = Client(adapter, MemoryNotifyAdapter(), types)
        pool = adapter._provider.pool  # type: ignore[attr-defined]  # the adapter's own pool
        async with Worker(client, _processors(), concurrency=12, poll_interval=60):
            assert pool.max_size == connections_needed(12) == 16
            assert await adapter.reserve_connections(1) == 16
    finally:
        await adapter.close()


async def test_a_callers_smaller_pool_keeps_its_size_and_is_warned_about(
    postgres_url: str, schema_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="jobchain.worker")
    pool: AsyncConnectionPool = AsyncConnectionPool(
        conninfo(postgres_url), min_size=0, max_size=5, open=False, kwargs={"autocommit": True}
    )
    await pool.open()
    try:
        adapter = PostgresStateAdapter.from_pool(pool, StateOptions(schema=schema_name))
        await adapter.migrate()
        client = Client(adapter, MemoryNotifyAdapter(), types)
        async with Worker(client, _processors(), concurrency=8, poll_interval=60) as worker:

            def warnings() -> list[str]:
                return [r.getMessage() for r in caplog.records if "state connections" in r.getMessage()]

            assert pool.max_size == 5
            assert len(warnings()) == 1
            assert worker.worker_id in warnings()[0]
            assert "needs 12 state connections, but its pool has 5" in warnings()[0]
            assert "pool_max_size" in warnings()[0]
    finally:
        await pool.close()
