"""Issue 34, finding 8: hostile cookies, CSRF tokens and credentials (non-ASCII, malformed)
are refused like any wrong one: no session, 401 or 403, never a 500 nor a logged traceback."""

from __future__ import annotations

import base64
import logging
from collections.abc import AsyncIterator

import pytest

from jobchain import Client, JobStatus, JobTypes, connect
from jobchain.dashboard import create_app
from jobchain.dashboard.security import COOKIE

from .conftest import TOKEN, Browser, csrf_of, settings

HOSTILE_COOKIES = (
    "abc.1.99999999999.é",
    "abc.1.99999999999.\u00ff\u00fe",
    "é.1.99999999999.abc",
    "abc.1.९९९९९९९९९९९.abc",  # Devanagari digits: str.isdigit() holds, the signature does not
    "....",
    ".",
)
HOSTILE_TOKENS = ("é", "\u00ff" * 43, "\u2603", "a\x00b", "\U0001f600" * 11)


TYPES = JobTypes()
FLAKY = TYPES.define("flaky", input=dict, output=dict, entry=True)


@pytest.fixture
async def memory_client() -> AsyncIterator[Client]:
    opened = await connect("memory://", notify="none", job_types=TYPES, migrate=True)
    yield opened
    await opened.close()


@pytest.fixture
def no_tracebacks(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING)
    return caplog


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def _cookie(value: str) -> dict[str, bytes]:
    # Raw bytes: httpx would refuse a non-ASCII str header; a hostile client sends them anyway.
    return {"cookie": f"{COOKIE}={value}".encode()}


@pytest.mark.parametrize("cookie", HOSTILE_COOKIES)
async def test_a_malformed_session_cookie_is_no_session(
    memory_client: Client, no_tracebacks: pytest.LogCaptureFixture, cookie: str
) -> None:
    web = Browser(create_app(memory_client, settings()))
    page = await web.get("/", headers=_cookie(cookie))
    assert page.status_code == 303, page.text
    assert page.headers["location"].startswith("/login")
    script = await web.get("/chains", headers={**_cookie(cookie), "accept": "application/json"})
    assert script.status_code == 401
    login = await web.get("/login", headers=_cookie(cookie))
    assert login.status_code == 200
    assert COOKIE in login.headers["set-cookie"]  # a fresh session replaces the bad cookie
    bearer = await web.get("/", headers={**_cookie(cookie), "authorization": f"Bearer {TOKEN}"})
    assert bearer.status_code == 200
    assert _errors(no_tracebacks) == []
    await web.aclose()


@pytest.mark.parametrize("token", HOSTILE_TOKENS)
async def test_a_non_ascii_csrf_token_is_403(
    memory_client: Client, no_tracebacks: pytest.LogCaptureFixture, token: str
) -> None:
    web = Browser(create_app(memory_client, settings()))
    await web.get("/login")
    login = await web.http.post("/login", data={"csrf_token": token, "token": TOKEN})
    assert login.status_code == 403, login.text
    assert "CSRF" in login.text
    assert (await web.login()).status_code == 303
    async with memory_client.transaction() as tx:
        chain = await memory_client.start_chain(tx, FLAKY, {})
    for action, field in (("/actions/cancel", "chain_id"), ("/actions/delete", "chain_id")):
        refused = await web.http.post(action, data={"csrf_token": token, field: chain.id})
        assert refused.status_code == 403, (action, refused.text)
    logout = await web.http.post("/logout", data={"csrf_token": token})
    assert logout.status_code == 403
    assert (await web.get("/")).status_code == 200  # still logged in: nothing was done
    found = await memory_client.get_chain(chain.id)
    assert found is not None
    assert found.status is JobStatus.PENDING
    assert _errors(no_tracebacks) == []
    await web.aclose()


async def test_the_real_csrf_token_still_works_after_hostile_ones(memory_client: Client) -> None:
    web = Browser(create_app(memory_client, settings()))
    page = await web.get("/login")
    await web.http.post("/login", data={"csrf_token": "é", "token": TOKEN})
    ok = await web.http.post("/login", data={"csrf_token": csrf_of(page.text), "token": TOKEN})
    assert ok.status_code == 303
    await web.aclose()


def _basic(raw: bytes) -> bytes:
    return b"Basic " + base64.b64encode(raw)


AUTHORIZATIONS = (
    "Bearer é".encode(),
    "Bearer \u00ff\u00fe".encode("latin-1"),
    "Basic é".encode(),  # not base64 at all, and not ASCII
    "Basic w6k=é".encode(),
    _basic(b"ops:\xff\xfe"),  # base64 of bytes that are not UTF-8
    _basic("ops:pässwörd".encode()),
    _basic("öps:s3cret-pass".encode()),
    _basic(b"ops"),  # no colon
    b"Basic ",
    b"Bearer",
    "Négociate abc".encode(),
)


@pytest.mark.parametrize("header", AUTHORIZATIONS)
async def test_hostile_authorization_headers_are_401(
    memory_client: Client, no_tracebacks: pytest.LogCaptureFixture, header: bytes
) -> None:
    app = create_app(memory_client, settings(username="ops", password="s3cret-pass"))
    web = Browser(app)
    response = await web.get("/", headers={"authorization": header, "accept": "*/*"})
    assert response.status_code == 401, response.text
    assert _errors(no_tracebacks) == []
    await web.aclose()


async def test_non_ascii_credentials_that_are_right_are_accepted(memory_client: Client) -> None:
    password = "pässwörd-✓"
    app = create_app(memory_client, settings(token="tökén-0123456789", username="öps", password=password))
    web = Browser(app)
    basic = {"authorization": _basic(f"öps:{password}".encode())}
    assert (await web.get("/", headers=basic)).status_code == 200
    page = await web.get("/login")
    form = {"csrf_token": csrf_of(page.text), "username": "öps", "password": password}
    assert (await web.http.post("/login", data=form)).status_code == 303
    await web.aclose()


@pytest.mark.parametrize("subject", ["²", "١٢", "٣" * 30, "9" * 5000])
async def test_a_hostile_count_in_a_notice_is_no_error(
    memory_client: Client, no_tracebacks: pytest.LogCaptureFixture, subject: str
) -> None:
    web = Browser(create_app(memory_client, settings()))
    await web.login()
    page = await web.get("/", params={"done": "retried_all", "subject": subject})
    assert page.status_code == 200, page.text
    assert "chains retried." in page.text
    assert _errors(no_tracebacks) == []
    await web.aclose()
