"""Logout revokes the session server-side (issue 34, finding 10): a copied cookie is refused
after logout, by the app that logged it out and by another dashboard process sharing the
``secret_key`` and the state backend (SQLite and PostgreSQL, real servers; memory:// within one
process). Without the state capability, revocations hold in the process that logged out."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jobchain import Client, connect
from jobchain.contracts import RevokesSessions, SessionRevoked
from jobchain.dashboard import create_app
from jobchain.dashboard.revocation import LocalRevocations, Revocations
from jobchain.dashboard.security import COOKIE, Session

from .conftest import TOKEN, Browser, csrf_of, job_types, settings


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
async def two_clients(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Client, Client]]:
    """Two clients (two dashboard processes' connections) over one state backend."""
    if request.param == "memory":
        shared = await connect("memory://", notify="none", job_types=job_types(), migrate=True)
        yield shared, shared  # one process: the in-process state is its only store
        await shared.close()
        return
    drop: Callable[[str], None] | None = None
    schema = f"jc_revoke_{uuid.uuid4().hex[:12]}"
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
    else:
        server = request.getfixturevalue("postgres_server")
        drop = request.getfixturevalue("drop_postgres_schema")  # not during teardown: deprecated
        url = f"{server}?schema={schema}"
    first = await connect(url, notify="none", job_types=job_types(), migrate=True)
    second = await connect(url, notify="none", job_types=job_types(), migrate=False)
    yield first, second
    await second.close()
    await first.close()
    if drop is not None:
        drop(schema)


async def _logged_in(web: Browser) -> str:
    response = await web.login()
    assert response.status_code == 303, response.text
    return web.http.cookies[COOKIE]


def _with_cookie(web: Browser, cookie: str) -> Browser:
    web.http.cookies.clear()
    web.http.cookies.set(COOKIE, cookie)
    return web


async def test_a_cookie_copied_before_logout_is_refused_by_every_dashboard_process(
    two_clients: tuple[Client, Client],
) -> None:
    client_a, client_b = two_clients
    app_a, app_b = create_app(client_a, settings()), create_app(client_b, settings())
    web_a, copy_a, copy_b = Browser(app_a), Browser(app_a), Browser(app_b)
    try:
        cookie = await _logged_in(web_a)
        # The copied cookie works on both processes while the session lasts.
        assert (await _with_cookie(copy_a, cookie).get("/")).status_code == 200
        assert (await _with_cookie(copy_b, cookie).get("/")).status_code == 200
        home = await web_a.get("/")
        out = await web_a.http.post("/logout", data={"csrf_token": csrf_of(home.text)})
        assert out.status_code == 303
        assert COOKIE in out.headers["set-cookie"]
        for copy in (copy_a, copy_b):
            refused = await _with_cookie(copy, cookie).get("/")
            assert refused.status_code == 303
            assert refused.headers["location"].startswith("/login")
            script = await copy.get("/chains", headers={"accept": "application/json"})
            assert script.status_code == 401
        # A bearer token still works beside the revoked cookie; a new login works too.
        assert (await copy_b.get("/", headers={"authorization": f"Bearer {TOKEN}"})).status_code == 200
        copy_b.http.cookies.clear()
        assert (await copy_b.login()).status_code == 303
        assert (await copy_b.get("/")).status_code == 200
    finally:
        for web in (web_a, copy_a, copy_b):
            await web.aclose()


async def test_the_state_backend_holds_the_revocation_by_its_hash(
    two_clients: tuple[Client, Client],
) -> None:
    client_a, client_b = two_clients
    web = Browser(create_app(client_a, settings()))
    try:
        cookie = await _logged_in(web)
        home = await web.get("/")
        await web.http.post("/logout", data={"csrf_token": csrf_of(home.text)})
    finally:
        await web.aclose()
    sid = cookie.split(".")[0]
    async with client_b.state.transaction(read_only=True) as tx:
        assert isinstance(tx, RevokesSessions)
        assert await tx.session_revoked(SessionRevoked(session_id=sid))
        assert not await tx.session_revoked(SessionRevoked(session_id=sid + "x"))


class _Source:
    def __init__(self, client: Any) -> None:
        self.client = client

    async def get(self) -> Any:
        return self.client


class _Client:
    def __init__(self, state: Any) -> None:
        self.state = state


class _PlainTx:
    """Has no sessions_revoke/session_revoked."""


class _PlainState:
    capabilities: frozenset[Any] = frozenset()
    time_precision = timedelta(microseconds=1)

    def __init__(self) -> None:
        self.opened = 0

    def transaction(self, **kwargs: Any) -> Any:
        from contextlib import asynccontextmanager

        @asynccontextmanager
        async def opened() -> AsyncIterator[_PlainTx]:
            self.opened += 1
            yield _PlainTx()

        return opened()


T0 = datetime(2030, 1, 1, tzinfo=UTC)


def _session(sid: str, expires: datetime) -> Session:
    return Session(sid, True, int(expires.timestamp()))


async def test_without_the_capability_revocations_hold_in_this_process() -> None:
    state = _PlainState()
    now = [T0]
    revocations = Revocations(_Source(_Client(state)), clock=lambda: now[0])
    session = _session("sid-1", T0 + timedelta(hours=12))
    assert not await revocations.revoked(session)
    await revocations.revoke(session)
    assert await revocations.revoked(session)
    assert not await revocations.revoked(_session("sid-2", T0 + timedelta(hours=12)))
    opened = state.opened
    await revocations.revoked(session)
    assert state.opened == opened  # learned once that the backend cannot store them
    now[0] = T0 + timedelta(hours=12)
    assert not await revocations.revoked(session)


def test_the_in_process_set_is_bounded_and_pruned_by_expiry() -> None:
    local = LocalRevocations(limit=3)
    for n in range(3):
        local.revoke(f"s{n}", T0 + timedelta(hours=n + 1), now=T0)
    assert all(local.revoked(f"s{n}", now=T0) for n in range(3))
    # Full: the revocation that expires first makes room.
    local.revoke("s3", T0 + timedelta(hours=9), now=T0)
    assert len(local) == 3
    assert not local.revoked("s0", now=T0)
    assert local.revoked("s3", now=T0)
    # Expired ones go first, before any live one is dropped.
    local.revoke("s4", T0 + timedelta(hours=9), now=T0 + timedelta(hours=3))
    assert len(local) == 2
    assert local.revoked("s3", now=T0 + timedelta(hours=3))
    assert local.revoked("s4", now=T0 + timedelta(hours=3))
