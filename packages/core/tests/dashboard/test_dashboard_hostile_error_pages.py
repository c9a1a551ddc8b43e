"""Issue 34, finding 7: an error page shown to a request that has not logged in (a 404 for a
static file, a 403 on the login form, a 405, a 500 or 503 while logging in) says what went
wrong and nothing else: no navigation, no state label (database user, host, database,
schema), no backend error text; every error page carries the security headers."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import httpx
import pytest

from jobchain import Client, JobTypes, connect
from jobchain.dashboard import create_app
from jobchain.errors import BackendUnavailableError

from .conftest import TOKEN, Browser, csrf_of, settings

LABEL = "postgresql://app_owner:***@db-internal.example:5432/payments?schema=jobchain_prod"
SECRETS_OF_THE_LABEL = ("app_owner", "db-internal.example", "payments", "jobchain_prod")
NAV = ('aria-label="main"', 'href="/chains"', 'href="/workers"', 'href="/schedules"', "Log out")


@pytest.fixture
async def memory_client() -> AsyncIterator[Client]:
    opened = await connect("memory://", notify="none", job_types=JobTypes(), migrate=True)
    yield opened
    await opened.close()


def _bare(response: httpx.Response) -> None:
    """``response`` is an error page without navigation, label or backend detail."""
    for text in (*NAV, *SECRETS_OF_THE_LABEL, "state-label"):
        assert text not in response.text, (text, response.text)
    assert "content-security-policy" in response.headers
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["cache-control"] == "no-store"


async def test_an_unauthenticated_404_has_no_navigation_nor_state_label(memory_client: Client) -> None:
    web = Browser(create_app(memory_client, settings(state_label=LABEL)))
    response = await web.get("/static/no-such-file.css")
    assert response.status_code == 404
    assert "no such page" in response.text
    _bare(response)
    await web.aclose()


async def test_an_unauthenticated_403_and_405_have_no_navigation_nor_state_label(
    memory_client: Client,
) -> None:
    web = Browser(create_app(memory_client, settings(state_label=LABEL)))
    await web.get("/login")
    forbidden = await web.http.post("/login", data={"token": TOKEN})
    assert forbidden.status_code == 403
    assert "CSRF" in forbidden.text
    _bare(forbidden)
    not_allowed = await web.http.put("/login")
    assert not_allowed.status_code == 405
    _bare(not_allowed)
    await web.aclose()


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (RuntimeError("boom in db-internal.example"), 500),
        (BackendUnavailableError(f"cannot reach {LABEL}: connection refused"), 503),
    ],
)
async def test_an_unauthenticated_server_error_says_only_that(
    memory_client: Client, caplog: pytest.LogCaptureFixture, error: Exception, status: int
) -> None:
    app = create_app(memory_client, settings(state_label=LABEL))

    def failing(token: str) -> bool:
        raise error

    app.state.jobchain_guard.check_token = failing  # the fault: a failure while logging in
    web = Browser(app)
    page = await web.get("/login")
    with caplog.at_level(logging.WARNING, logger="jobchain.dashboard"):
        response = await web.http.post("/login", data={"csrf_token": csrf_of(page.text), "token": "x"})
    assert response.status_code == status
    assert "see the server&#39;s log" in response.text
    _bare(response)
    assert any("db-internal.example" in r.getMessage() or r.exc_info for r in caplog.records)
    await web.aclose()


async def test_a_logged_in_error_page_keeps_its_navigation_and_label(memory_client: Client) -> None:
    web = Browser(create_app(memory_client, settings(state_label=LABEL)))
    await web.login()
    response = await web.get("/chains/not-an-id")
    assert response.status_code == 404
    for text in NAV:
        assert text in response.text
    assert LABEL in response.text
    missing = await web.get("/static/no-such-file.css")
    assert missing.status_code == 404
    assert 'aria-label="main"' in missing.text
    assert 'href="/chains"' in missing.text  # the dashboard's links, not the static mount's
    assert 'href="/static/chains"' not in missing.text
    await web.aclose()


async def test_a_logged_in_server_error_carries_the_security_headers(memory_client: Client) -> None:
    web = Browser(create_app(memory_client, settings(state_label=LABEL)))
    await web.login()

    async def broken(**_: object) -> None:
        raise RuntimeError("a bug")

    # The fault: a bug in a page (the overview reads queue_stats first).
    memory_client.queue_stats = broken  # type: ignore[method-assign,assignment]  # a stand-in that raises
    response = await web.get("/")
    assert response.status_code == 500
    assert "internal error" in response.text
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["cache-control"] == "no-store"
    await web.aclose()
