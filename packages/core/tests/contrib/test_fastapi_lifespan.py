"""JobchainLifespan in a real FastAPI app, run by Starlette's TestClient (the ASGI lifespan protocol).

A request starts a chain in a transaction, the worker beside the app runs it, a second
request waits for it completed; shutdown stops the worker (in-flight attempts finish) and
closes the client. SQLite (a temporary file) and ``memory://`` here; PostgreSQL in
test_fastapi_postgres.py.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi import Depends, FastAPI, Request
from fastapi.testclient import TestClient

import jobchain
from jobchain.contrib.asgi import JobchainLifespan, LifespanNotRunningError, get_client
from jobchain.worker import Worker

from .shop import EventRecorder, build_app, place_order, processors, types

WAIT = 10.0
"""Seconds a condition may take before the test fails (never slept: waited on)."""


def place_and_wait(http: TestClient, item: str) -> dict[str, Any]:
    placed = http.post("/orders", params={"item": item})
    assert placed.status_code == 200, placed.text
    chain_id = placed.json()["chain_id"]
    done = http.get(f"/orders/{chain_id}", params={"wait": WAIT})
    assert done.status_code == 200, done.text
    return {"chain_id": chain_id, **done.json()}


@pytest.fixture(params=["sqlite", "memory"])
def lifespan(request: pytest.FixtureRequest, tmp_path: Path) -> JobchainLifespan:
    if request.param == "sqlite":
        # The processors= shorthand; memory:// notify wakes the worker in this process at once.
        return JobchainLifespan(
            f"sqlite:///{tmp_path / 'shop.db'}",
            notify="memory://",
            job_types=types,
            processors=processors(),
            migrate=True,
        )
    # No notify: the worker= factory sets a short poll so the test does not wait for a minute.
    return JobchainLifespan(
        "memory://",
        notify="none",
        job_types=types,
        worker=lambda client: Worker(client, processors(), poll_interval=0.05),
    )


def test_a_chain_started_in_a_request_is_run_by_the_worker_beside_the_app(
    lifespan: JobchainLifespan,
) -> None:
    app = build_app(lifespan)
    with TestClient(app) as http:
        client = lifespan.client
        worker = lifespan.worker
        assert worker is not None
        assert worker.type_names == ["shop.order", "shop.ship"]
        result = place_and_wait(http, "teapot")
        assert result["status"] == "completed"
        assert result["output"] == "shipped TEAPOT"
        assert http.get("/where").json() == {"request_state": True, "app_state": True, "lifespan": True}
    # Shutdown closed the client and took it off the app.
    with pytest.raises(LifespanNotRunningError):
        _ = lifespan.client
    assert not hasattr(app.state, "jobchain")
    with pytest.raises(jobchain.AdapterClosedError):
        asyncio.run(client.get_chain(result["chain_id"]))


def test_shutdown_lets_the_running_attempt_finish_then_closes(tmp_path: Path) -> None:
    handler_started = threading.Event()
    release = threading.Event()

    def hold() -> None:
        handler_started.set()
        assert release.wait(WAIT), "the test never released the handler"

    recorder = EventRecorder()
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    lifespan = JobchainLifespan(
        url,
        notify="memory://",
        job_types=types,
        processors=processors(hold),
        observers=[recorder],
        migrate=True,
    )
    http = TestClient(build_app(lifespan))
    http.__enter__()
    try:
        chain_id = http.post("/orders", params={"item": "kettle"}).json()["chain_id"]
        assert handler_started.wait(WAIT), "the shipping job never started"
    except BaseException:
        release.set()
        http.__exit__(None, None, None)
        raise
    shutdown = threading.Thread(target=http.__exit__, args=(None, None, None))
    shutdown.start()
    try:
        assert recorder.flag("worker_stopping").wait(WAIT), "shutdown never stopped the worker"
        # The worker drains: shutdown waits for the held attempt, which has not completed.
        assert shutdown.is_alive()
        assert "chain_completed" not in recorder.snapshot()
    finally:
        release.set()
        shutdown.join(WAIT)
    assert not shutdown.is_alive()
    names = recorder.snapshot()
    assert names.index("worker_stopping") < names.index("chain_completed") < names.index("worker_stopped")

    async def read_back() -> jobchain.Chain | None:
        async with await jobchain.connect(url, notify="none", job_types=types) as reader:
            return await reader.get_chain(chain_id)

    chain = asyncio.run(read_back())
    assert chain is not None
    assert chain.status is jobchain.JobStatus.COMPLETED
    assert chain.output == "shipped KETTLE"


def test_the_users_lifespan_runs_inside_with_the_client_ready(tmp_path: Path) -> None:
    recorder = EventRecorder()
    seen: dict[str, Any] = {}

    @asynccontextmanager
    async def resources(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        client = app.state.jobchain
        seen["client_at_startup"] = isinstance(client, jobchain.Client)
        seen["worker_started_before_user_startup"] = "worker_started" in recorder.snapshot()
        yield {"greeting": "hello"}
        seen["worker_stopped_before_user_shutdown"] = "worker_stopped" in recorder.snapshot()
        # The client is still open during the user's shutdown.
        seen["chains_at_shutdown"] = len((await client.list_chains()).items)

    lifespan = JobchainLifespan(
        f"sqlite:///{tmp_path / 'shop.db'}",
        notify="memory://",
        job_types=types,
        processors=processors(),
        lifespan=resources,
        observers=[recorder],
        migrate=True,
    )
    app = build_app(lifespan)

    @app.get("/hello")
    async def hello(request: Request) -> dict[str, Any]:
        return {"greeting": request.state.greeting, "has_client": request.state.jobchain is lifespan.client}

    with TestClient(app) as http:
        assert place_and_wait(http, "mug")["status"] == "completed"
        assert http.get("/hello").json() == {"greeting": "hello", "has_client": True}
    assert seen == {
        "client_at_startup": True,
        "worker_started_before_user_startup": False,
        "worker_stopped_before_user_shutdown": True,
        "chains_at_shutdown": 1,
    }


async def test_entered_inside_the_users_own_lifespan() -> None:
    # The other way round: the user's lifespan enters jobchain's and passes its state on.
    jobchain_lifespan = JobchainLifespan("memory://", notify="none", job_types=types)
    app = FastAPI()
    async with jobchain_lifespan(app) as state:
        assert set(state) == {"jobchain"}
        assert app.state.jobchain is state["jobchain"] is jobchain_lifespan.client
        assert jobchain_lifespan.worker is None  # no processors: the app only starts and reads
        async with jobchain_lifespan.client.transaction() as tx:
            started = await jobchain_lifespan.client.start_chain(tx, place_order, "cup")
        chain = await jobchain_lifespan.client.get_chain(started.id)
        assert chain is not None
        assert chain.status is jobchain.JobStatus.PENDING
    assert not hasattr(app.state, "jobchain")


def test_get_client_without_the_lifespan_names_the_fix() -> None:
    app = FastAPI()

    @app.get("/")
    async def index(chains: jobchain.Client = Depends(get_client)) -> str:
        return "unreachable"

    with TestClient(app) as http, pytest.raises(LifespanNotRunningError, match="lifespan=JobchainLifespan"):
        http.get("/")


def test_a_lifespan_runs_once_at_a_time() -> None:
    lifespan = JobchainLifespan("memory://", notify="none", job_types=types)

    async def twice() -> None:
        async with lifespan(object()):
            with pytest.raises(jobchain.InvalidArgumentError, match="already running"):
                async with lifespan(object()):
                    pass

    asyncio.run(twice())


def test_bad_arguments_fail_at_construction() -> None:
    with pytest.raises(jobchain.InvalidArgumentError, match="not both"):
        JobchainLifespan(
            "memory://",
            job_types=types,
            processors=processors(),
            worker=lambda client: Worker(client, processors()),
        )
    with pytest.raises(jobchain.InvalidArgumentError, match="JobTypes"):
        JobchainLifespan("memory://", job_types={})  # type: ignore[arg-type]
    with pytest.raises(jobchain.InvalidArgumentError, match="identifier"):
        JobchainLifespan("memory://", job_types=types, key="job chain")


def test_a_failing_user_startup_closes_the_client() -> None:
    opened: list[jobchain.Client] = []

    @asynccontextmanager
    async def broken(app: FastAPI) -> AsyncIterator[None]:
        opened.append(app.state.jobchain)
        raise RuntimeError("no database")
        yield

    lifespan = JobchainLifespan("memory://", notify="none", job_types=types, lifespan=broken)
    with pytest.raises(RuntimeError, match="no database"), TestClient(build_app(lifespan)):
        pass
    [client] = opened
    with pytest.raises(jobchain.AdapterClosedError):
        asyncio.run(client.get_chain("0190a3c4-0000-7000-8000-000000000000"))


def test_a_failed_connect_leaves_the_lifespan_startable_again() -> None:
    lifespan = JobchainLifespan("nosuchscheme://x", notify="none", job_types=types)

    async def enter() -> None:
        async with lifespan(object()):
            raise AssertionError("connected to an unknown scheme")

    for _ in range(2):  # the second time is the same error, not "already running"
        with pytest.raises(jobchain.UnknownSchemeError):
            asyncio.run(enter())
    with pytest.raises(LifespanNotRunningError):
        _ = lifespan.client
