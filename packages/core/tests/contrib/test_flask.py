"""A Flask app starts chains with jobchain.sync inside its own transaction (sqlite3, SQLAlchemy Session).

The request writes an order row and starts the chain in one transaction of the app's own
connection; a declined order rolls both back. A worker (the async one, as ``jobchain worker``
runs it) then completes the chain and a second request reads it. On PostgreSQL the worker
polls only once a minute, so the chain completes in time only if the wake-up sent at the
request's commit (LISTEN/NOTIFY) reached it.

PostgreSQL is ``JOBCHAIN_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``),
in a fresh schema dropped afterwards; unreachable, the test skips, except under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from flask import Flask, request
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import jobchain
import jobchain.sync
from jobchain.sync import SyncClient, SyncTransaction
from jobchain.worker import Worker

from .shop import place_order, processors, types

WAIT = 10.0


class DeclinedError(Exception):
    """The payment failed after the chain was started: the request's transaction rolls back."""

    def __init__(self, chain_id: str) -> None:
        super().__init__(chain_id)
        self.chain_id = chain_id


Join = Callable[[], AbstractContextManager[tuple[object, Callable[[str, str], None]]]]
"""Opens the app's own transaction: (the object jobchain joins, insert(item, chain_id)).

Leaving it normally commits; an exception rolls back."""


@dataclass
class Backend:
    state_url: str
    notify: str
    join: Join
    wakes_at_commit: bool


def build_app(chains: SyncClient, join: Join) -> Flask:
    app = Flask(__name__)
    app.testing = True

    @app.errorhandler(DeclinedError)
    def declined(error: DeclinedError) -> tuple[dict[str, str], int]:
        return {"declined": error.chain_id}, 402

    @app.post("/orders")
    def order() -> tuple[dict[str, str], int]:
        item = request.args["item"]
        tx: SyncTransaction | None = None
        with join() as (connection, insert):
            with chains.transaction(connection=connection) as tx:
                started = chains.start_chain(tx, place_order, item)
            insert(item, started.id)
            if request.args.get("decline"):
                raise DeclinedError(started.id)
        assert tx is not None
        tx.flush()  # committed: a no-op where jobchain saw the commit or announced in the statement
        return {"chain_id": started.id}, 201

    @app.get("/orders/<chain_id>")
    def status(chain_id: str) -> tuple[dict[str, Any], int]:
        chain = chains.get_chain(chain_id)
        if chain is None:
            return {"status": None}, 404
        return {"status": chain.status.value, "output": chain.output}, 200

    return app


def sqlite3_join(path: Path) -> Join:
    @contextmanager
    def join() -> Iterator[tuple[object, Callable[[str, str], None]]]:
        conn = sqlite3.connect(path)
        try:
            yield conn, lambda item, chain_id: _insert_sqlite3(conn, item, chain_id)
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        finally:
            conn.close()

    return join


def _insert_sqlite3(conn: sqlite3.Connection, item: str, chain_id: str) -> None:
    conn.execute("INSERT INTO orders (item, chain_id) VALUES (?, ?)", (item, chain_id))


def session_join(engine: Engine, table: str) -> Join:
    @contextmanager
    def join() -> Iterator[tuple[object, Callable[[str, str], None]]]:
        with Session(engine) as session, session.begin():

            def insert(item: str, chain_id: str) -> None:
                session.execute(
                    text(f"INSERT INTO {table} (item, chain_id) VALUES (:item, :chain)"),
                    {"item": item, "chain": chain_id},
                )

            yield session, insert

    return join


@pytest.fixture(params=["sqlite3", "sqlite-session", "postgresql-session"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param.startswith("sqlite"):
        path = tmp_path / "shop.db"
        with sqlite3.connect(path) as setup:
            setup.execute("CREATE TABLE orders (item TEXT PRIMARY KEY, chain_id TEXT)")
        setup.close()
        if request.param == "sqlite3":
            yield Backend(f"sqlite:///{path}", "none", sqlite3_join(path), wakes_at_commit=False)
            return
        engine = create_engine(f"sqlite:///{path}")
        yield Backend(f"sqlite:///{path}", "none", session_join(engine, "orders"), wakes_at_commit=False)
        engine.dispose()
        return
    server: str = request.getfixturevalue("postgres_server")
    drop: Callable[[str], None] = request.getfixturevalue("drop_postgres_schema")
    schema = f"jc_flask_{uuid.uuid4().hex[:12]}"
    url = f"{server}{'&' if '?' in server else '?'}schema={schema}&channel_prefix={schema}"
    engine = create_engine(server.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.begin() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
            conn.execute(text(f"CREATE TABLE {schema}.orders (item text PRIMARY KEY, chain_id uuid)"))
        yield Backend(url, url, session_join(engine, f"{schema}.orders"), wakes_at_commit=True)
    finally:
        engine.dispose()
        drop(schema)


@pytest.mark.pg_connections(9)  # measured 8 at once (the shared PostgreSQL connection budget)
def test_a_flask_request_starts_a_chain_in_its_own_transaction(backend: Backend) -> None:
    chains = jobchain.sync.connect(backend.state_url, notify=backend.notify, job_types=types, migrate=True)
    try:
        http = build_app(chains, backend.join).test_client()

        declined = http.post("/orders", query_string={"item": "vase", "decline": "1"})
        assert declined.status_code == 402
        dropped = declined.get_json()["declined"]
        assert chains.get_chain(dropped) is None  # rolled back with the order

        placed = http.post("/orders", query_string={"item": "vase"})
        assert placed.status_code == 201, placed.get_data(as_text=True)
        chain_id = placed.get_json()["chain_id"]
        assert http.get(f"/orders/{chain_id}").get_json() == {"status": "pending", "output": None}
        assert [c.id for c in chains.list_chains().items] == [chain_id]

        def place_while_the_worker_runs() -> str:
            placed = http.post("/orders", query_string={"item": "lamp"})  # in a thread: no event loop
            assert placed.status_code == 201, placed.get_data(as_text=True)
            return str(placed.get_json()["chain_id"])

        later = run_worker(backend, chain_id, place_while_the_worker_runs)

        assert http.get(f"/orders/{chain_id}").get_json() == {"status": "completed", "output": "shipped VASE"}
        assert http.get(f"/orders/{later}").get_json() == {"status": "completed", "output": "shipped LAMP"}
        assert chains.await_chain(chain_id, timeout=WAIT).output == "shipped VASE"
    finally:
        chains.close()


def run_worker(backend: Backend, chain_id: str, place: Callable[[], str]) -> str:
    """A worker, as ``jobchain worker`` runs it: it completes ``chain_id``, then one more order is
    placed by a Flask request while it waits, and completed too; returns that chain's id.

    Where a start announces itself at the request's commit, the worker polls once a minute:
    only the wake-up can finish the second chain within the test's wait.
    """

    async def main() -> str:
        poll = 60.0 if backend.wakes_at_commit else 0.05
        async with await jobchain.connect(
            backend.state_url, notify=backend.notify, job_types=types
        ) as client:
            async with Worker(client, processors(), poll_interval=poll):
                await client.await_chain(chain_id, timeout=WAIT, poll_interval=0.1)
                later = await asyncio.to_thread(place)
                await client.await_chain(later, timeout=WAIT, poll_interval=0.1)
        return later

    return asyncio.run(main())
