"""JobchainLifespan on PostgreSQL with LISTEN/NOTIFY: a request writes an order row and starts its
chain in one transaction of the app's own psycopg connection; the worker beside the app wakes on
the notification and runs it; a second request waits for it completed.

PostgreSQL is ``JOBCHAIN_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``),
in a fresh schema dropped afterwards; unreachable, the test skips, except under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

import jobchain
from jobchain.contrib.asgi import JobchainLifespan

from .shop import Chains, EventRecorder, place_order, processors, types

WAIT = 10.0


@pytest.fixture
def schema(postgres_server: str, drop_postgres_schema: Callable[[str], None]) -> Iterator[str]:
    name = f"jc_asgi_{uuid.uuid4().hex[:12]}"
    yield name
    drop_postgres_schema(name)


def conninfo(server: str) -> str:
    from jobchain.url import BackendURL
    from jobchain_postgres.options import target

    return target(BackendURL.parse(server), 5).conninfo


@pytest.mark.pg_connections(6)  # measured 5 at once (the shared PostgreSQL connection budget)
def test_a_request_starts_a_chain_in_its_own_transaction_and_the_worker_runs_it(
    postgres_server: str, schema: str
) -> None:
    import psycopg

    url = f"{postgres_server}{'&' if '?' in postgres_server else '?'}schema={schema}&channel_prefix={schema}"
    recorder = EventRecorder()

    @asynccontextmanager
    async def database(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        # The app's own database resource; the schema exists: the jobchain lifespan migrated it.
        connection = await psycopg.AsyncConnection.connect(conninfo(postgres_server))
        await connection.execute(f"CREATE TABLE {schema}.orders (item text PRIMARY KEY, chain_id uuid)")
        await connection.commit()
        try:
            yield {"db": connection}
        finally:
            await connection.close()

    lifespan = JobchainLifespan(
        url,
        notify=url,
        job_types=types,
        processors=processors(),
        lifespan=database,
        observers=[recorder],
        migrate=True,
    )
    app = FastAPI(lifespan=lifespan)

    @app.post("/orders")
    async def order(item: str, request: Request, chains: Chains) -> dict[str, str]:
        db: psycopg.AsyncConnection[Any] = request.state.db
        async with db.transaction():
            async with chains.transaction(connection=db) as tx:
                started = await chains.start_chain(tx, place_order, item)
            await db.execute(f"INSERT INTO {schema}.orders VALUES (%s, %s)", [item, started.id])
        return {"chain_id": started.id}

    @app.get("/orders/{chain_id}")
    async def status(chain_id: str, request: Request, chains: Chains) -> dict[str, Any]:
        # The worker's poll is a minute away: only the notification can finish this in time.
        chain = await chains.await_chain(chain_id, timeout=WAIT, poll_interval=WAIT)
        db: psycopg.AsyncConnection[Any] = request.state.db
        row = await (
            await db.execute(f"SELECT item FROM {schema}.orders WHERE chain_id = %s", [chain_id])
        ).fetchone()
        await db.commit()
        return {"status": chain.status.value, "output": chain.output, "item": row[0] if row else None}

    with TestClient(app) as http:
        client = lifespan.client
        placed = http.post("/orders", params={"item": "lamp"})
        assert placed.status_code == 200, placed.text
        chain_id = placed.json()["chain_id"]
        done = http.get(f"/orders/{chain_id}")
        assert done.status_code == 200, done.text
        assert done.json() == {"status": "completed", "output": "shipped LAMP", "item": "lamp"}
    names = recorder.snapshot()
    assert names.index("chain_completed") < names.index("worker_stopping") < names.index("worker_stopped")
    with pytest.raises(jobchain.AdapterClosedError):
        asyncio.run(client.get_chain(chain_id))
