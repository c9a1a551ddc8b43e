"""scratch_database on PostgreSQL: a new schema per test, dropped with everything in it."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

import jobchain
from jobchain import JobStatus, JobTypes
from jobchain.errors import BackendUnreachableError
from jobchain.testing import FrozenClock, RunOutcome, run_until_idle, scratch_database
from jobchain.url import BackendURL
from jobchain.worker import Attempt, Backoff, Completed, Processors
from jobchain_postgres import connection_of

from .conftest import conninfo, with_query

pytestmark = pytest.mark.pg_connections(4)  # the adapter's pool (2 at once) and the checks

job_types = JobTypes()
ship = job_types.define("ship", input=int, output=str, entry=True)
processors = Processors()
tables: list[sql.Composed] = []  # the test's own table, qualified by its scratch schema


@processors.handler(ship, retry=Backoff(initial=timedelta(seconds=5), maximum=timedelta(seconds=5)))
async def on_ship(attempt: Attempt[int, str]) -> Completed:
    await attempt.prepare("atomic")
    await connection_of(attempt).execute(
        sql.SQL("INSERT INTO {} (order_id, attempt) VALUES (%s, %s)").format(tables[0]),
        (attempt.input, attempt.job.attempt),
    )
    if attempt.job.attempt == 1:
        raise RuntimeError("carrier down: the row rolls back with the attempt")
    return await attempt.complete(f"order {attempt.input} shipped")


def _schemas(url: str, name: str) -> int:
    with psycopg.connect(conninfo(url)) as connection:
        row = connection.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (name,)).fetchone()
        assert row is not None
        return int(row[0])


async def test_a_scratch_schema_holds_a_test_and_is_dropped_after_it(postgres_url: str) -> None:
    clock = FrozenClock()
    with scratch_database(with_query(postgres_url, claim="atomic-update")) as url:
        query = BackendURL.parse(url).query
        schema = query["schema"]
        assert schema.startswith("jobchain_scratch_")
        assert query["claim"] == "atomic-update"
        assert _schemas(postgres_url, schema) == 1
        # The application's own table, in the scratch schema too, so it goes with it.
        tables[:] = [sql.SQL("{}.shipments").format(sql.Identifier(schema))]
        async with await jobchain.connect(
            url, notify="none", job_types=job_types, clock=clock, migrate=True
        ) as client:
            async with client.transaction() as tx:
                await connection_of(tx).execute(
                    sql.SQL("CREATE TABLE {} (order_id int, attempt int)").format(tables[0])
                )
                started = await client.start_chain(tx, ship, 42)
            assert [r.outcome for r in await run_until_idle(client, processors)] == [RunOutcome.RETRIED]
            clock.advance(seconds=5)
            assert [r.outcome for r in await run_until_idle(client, processors)] == [RunOutcome.COMPLETED]
            chain = await client.get_chain(started.id)
            assert chain is not None
            assert chain.status is JobStatus.COMPLETED
        with psycopg.connect(conninfo(postgres_url)) as own:
            rows = own.execute(sql.SQL("SELECT order_id, attempt FROM {}").format(tables[0])).fetchall()
            assert rows == [(42, 2)]  # attempt 1's row rolled back with it
    assert _schemas(postgres_url, schema) == 0


def test_an_unreachable_server_is_a_typed_error_and_nothing_is_yielded() -> None:
    with pytest.raises(BackendUnreachableError, match="cannot create a scratch schema"):
        with scratch_database("postgresql://postgres@127.0.0.1:1/test?connect_timeout=2"):
            pytest.fail("yielded without a schema")
