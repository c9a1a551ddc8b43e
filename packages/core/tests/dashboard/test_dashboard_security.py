"""The dashboard's security: authentication, sessions, CSRF, read-only mode, escaping, headers,
secrets never rendered, and the refusal to serve in the open without credentials."""

from __future__ import annotations

import base64
import html
import re

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from jobchain import Client, JobStatus
from jobchain.dashboard import (
    DashboardCredentialsError,
    DashboardSettings,
    check_bind,
    create_app,
    create_app_from_url,
)
from jobchain.dashboard.security import COOKIE, FailedLogins
from jobchain.errors import InvalidArgumentError

from .conftest import HOSTILE, SECRET, TOKEN, Browser, Seeded, csrf_of, settings

PAGES = ("/", "/chains", "/jobs", "/jobs?status=pending", "/workers", "/schedules")


# ---------------------------------------------------------------- authentication


async def test_an_unauthenticated_browser_is_sent_to_the_login_form(client: Client, seeded: Seeded) -> None:
    web = Browser(create_app(client, settings()))
    for path in (*PAGES, f"/chains/{seeded.failed}"):
        response = await web.get(path)
        assert response.status_code == 303, path
        assert response.headers["location"].startswith("/login?next=")
    login = await web.get("/login")
    assert login.status_code == 200
    assert 'name="token"' in login.text
    assert seeded.failed not in login.text
    await web.aclose()


async def test_an_unauthenticated_script_gets_401_and_nothing_changes(client: Client, seeded: Seeded) -> None:
    web = Browser(create_app(client, settings()))
    response = await web.get("/chains", headers={"accept": "application/json"})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    wrong = await web.get("/chains", headers={"authorization": "Bearer wrong-token"})
    assert wrong.status_code == 401
    action = await web.http.post("/actions/retry", data={"job_id": seeded.failed, "csrf_token": "x"})
    assert action.status_code == 401
    job = await client.get_job(seeded.failed)
    assert job is not None
    assert job.status is JobStatus.FAILED
    await web.aclose()


async def test_a_bearer_token_authenticates_each_request(client: Client, seeded: Seeded) -> None:
    web = Browser(create_app(client, settings()))
    for path in PAGES:
        response = await web.get(path, headers={"authorization": f"Bearer {TOKEN}"})
        assert response.status_code == 200, path
    await web.aclose()


async def test_basic_credentials_authenticate_and_are_challenged(client: Client) -> None:
    web = Browser(create_app(client, settings(token=None, username="ops", password="s3cret-pass")))

    def basic(user: str, password: str) -> dict[str, str]:
        encoded = base64.b64encode(f"{user}:{password}".encode()).decode()
        return {"authorization": f"Basic {encoded}"}

    assert (await web.get("/", headers=basic("ops", "s3cret-pass"))).status_code == 200
    for user, password in (("ops", "wrong"), ("root", "s3cret-pass")):
        refused = await web.get("/", headers={**basic(user, password), "accept": "*/*"})
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith('Basic realm="jobchain"')
    garbage = await web.get("/", headers={"authorization": "Basic !!!", "accept": "*/*"})
    assert garbage.status_code == 401
    login = await web.get("/login")
    assert 'name="username"' in login.text
    assert 'name="token"' not in login.text
    ok = await web.http.post(
        "/login",
        data={"csrf_token": csrf_of(login.text), "username": "ops", "password": "s3cret-pass", "next": "/"},
    )
    assert ok.status_code == 303
    assert (await web.get("/")).status_code == 200
    await web.aclose()


async def test_login_rotates_the_session_and_logout_ends_it(client: Client) -> None:
    web = Browser(create_app(client, settings()))
    page = await web.get("/login")
    before = web.http.cookies[COOKIE]
    wrong = await web.http.post("/login", data={"csrf_token": csrf_of(page.text), "token": "nope"})
    assert wrong.status_code == 401
    assert "Wrong credentials." in wrong.text
    assert (await web.get("/")).status_code == 303
    response = await web.login()
    assert response.status_code == 303
    assert response.headers["location"] == "/"
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    assert web.http.cookies[COOKIE] != before  # a planted session id is worth nothing
    home = await web.get("/")
    assert home.status_code == 200
    out = await web.http.post("/logout", data={"csrf_token": csrf_of(home.text)})
    assert out.status_code == 303
    assert (await web.get("/")).status_code == 303
    await web.aclose()


async def test_a_forged_or_foreign_session_cookie_is_not_a_login(client: Client) -> None:
    app = create_app(client, settings())
    web = Browser(app)
    await web.login()
    good = web.http.cookies[COOKIE]
    sid, _flag, expires, signature = good.split(".")
    forged = f"{sid}.1.{int(expires) + 10_000}.{signature}"
    other = Browser(create_app(client, settings(secret_key=b"another-secret-key-of-32-bytes!!")))
    for cookie, target in ((forged, web), (good, other)):
        target.http.cookies.clear()
        target.http.cookies.set(COOKIE, cookie)
        assert (await target.get("/")).status_code == 303
    await web.aclose()
    await other.aclose()


async def test_changing_the_token_ends_existing_sessions(client: Client) -> None:
    web = Browser(create_app(client, settings()))
    await web.login()
    cookie = web.http.cookies[COOKIE]
    rotated = Browser(create_app(client, settings(token="a-brand-new-token-9876543210")))
    rotated.http.cookies.set(COOKIE, cookie)
    assert (await rotated.get("/")).status_code == 303
    await web.aclose()
    await rotated.aclose()


async def test_repeated_wrong_credentials_are_refused_for_a_while(client: Client) -> None:
    app = create_app(client, settings())
    guesser = Browser(app, address="203.0.113.7")
    page = await guesser.get("/login")
    for _ in range(10):
        wrong = await guesser.http.post("/login", data={"csrf_token": csrf_of(page.text), "token": "guess"})
        assert wrong.status_code == 401
    right = await guesser.http.post("/login", data={"csrf_token": csrf_of(page.text), "token": TOKEN})
    assert right.status_code == 429
    assert "Too many failed logins" in right.text
    assert (await guesser.get("/")).status_code == 303  # not logged in
    bearer = await guesser.get("/", headers={"authorization": f"Bearer {TOKEN}"})
    assert bearer.status_code == 429
    someone_else = Browser(app, address="198.51.100.2")
    assert (await someone_else.login()).status_code == 303
    await guesser.aclose()
    await someone_else.aclose()


async def test_wrong_bearer_tokens_count_as_failed_logins(client: Client) -> None:
    web = Browser(create_app(client, settings()), address="203.0.113.8")
    for _ in range(10):
        assert (await web.get("/", headers={"authorization": "Bearer guess"})).status_code == 401
    refused = await web.get("/", headers={"authorization": f"Bearer {TOKEN}"})
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "60"
    await web.aclose()


def test_failed_logins_are_forgotten_after_the_window() -> None:
    now = [0.0]
    failures = FailedLogins(limit=3, window=60.0, clock=lambda: now[0])
    for _ in range(3):
        failures.record("a")
    assert failures.blocked("a")
    assert not failures.blocked("b")
    now[0] = 59.0
    assert failures.blocked("a")
    now[0] = 60.5
    assert not failures.blocked("a")


# ---------------------------------------------------------------- CSRF


async def test_an_action_without_a_valid_csrf_token_is_403_and_changes_nothing(
    browser: Browser, client: Client, seeded: Seeded
) -> None:
    other = Browser(browser.http._transport.app)  # type: ignore[attr-defined]  # same app, another session
    await other.login()
    foreign = csrf_of((await other.get("/jobs")).text)
    for token in (None, "", "forged", foreign):
        data = {"job_id": seeded.failed, "next": "/jobs"}
        if token is not None:
            data["csrf_token"] = token
        response = await browser.http.post("/actions/retry", data=data)
        assert response.status_code == 403, token
        assert "CSRF" in response.text
    cancel = await browser.http.post(
        "/actions/cancel", data={"chain_id": seeded.pending[0], "csrf_token": "x"}
    )
    assert cancel.status_code == 403
    delete = await browser.http.post("/actions/delete", data={"chain_id": seeded.hostile})
    assert delete.status_code == 403
    failed = await client.get_job(seeded.failed)
    assert failed is not None
    assert failed.status is JobStatus.FAILED
    pending = await client.get_chain(seeded.pending[0])
    assert pending is not None
    assert pending.status is JobStatus.PENDING
    assert await client.get_chain(seeded.hostile) is not None
    await other.aclose()


async def test_a_cross_site_origin_is_refused_even_with_a_token(
    browser: Browser, client: Client, seeded: Seeded
) -> None:
    token = csrf_of((await browser.get("/jobs")).text)
    response = await browser.http.post(
        "/actions/retry",
        data={"job_id": seeded.failed, "csrf_token": token},
        headers={"origin": "https://evil.example"},
    )
    assert response.status_code == 403
    job = await client.get_job(seeded.failed)
    assert job is not None
    assert job.status is JobStatus.FAILED


async def test_login_needs_the_csrf_token_too(client: Client) -> None:
    web = Browser(create_app(client, settings()))
    await web.get("/login")
    response = await web.http.post("/login", data={"token": TOKEN})
    assert response.status_code == 403
    assert (await web.get("/")).status_code == 303
    await web.aclose()


# ---------------------------------------------------------------- read-only


async def test_read_only_hides_and_refuses_every_action(client: Client, seeded: Seeded) -> None:
    web = Browser(create_app(client, settings(read_only=True)))
    await web.login()
    for path in (*PAGES, f"/chains/{seeded.failed}", f"/chains/{seeded.pending[0]}"):
        page = (await web.get(path)).text
        assert "data-action=" not in page, path
        assert "/actions/" not in page, path
    assert "read-only" in (await web.get("/")).text
    token = csrf_of((await web.get("/")).text)
    for action, field, value in (
        ("retry", "job_id", seeded.failed),
        ("cancel", "chain_id", seeded.pending[0]),
        ("delete", "chain_id", seeded.hostile),
        ("retry-all", "status", "failed"),
    ):
        response = await web.http.post(f"/actions/{action}", data={"csrf_token": token, field: value})
        assert response.status_code == 403
        assert "read-only" in response.text
    job = await client.get_job(seeded.failed)
    assert job is not None
    assert job.status is JobStatus.FAILED
    assert await client.get_chain(seeded.hostile) is not None
    await web.aclose()


# ---------------------------------------------------------------- escaping


async def test_hostile_inputs_and_error_messages_render_as_text(browser: Browser, seeded: Seeded) -> None:
    pages = [
        (await browser.get(path)).text
        for path in (f"/chains/{seeded.hostile}", "/jobs", "/chains?type=flaky", "/")
    ]
    chain_page = pages[0]
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in chain_page  # the input and the error
    assert chain_page.count("&lt;script&gt;") >= 3
    assert "&lt;script&gt;" in pages[1]  # the last error's first line on the failed jobs page
    for page in pages:
        assert "<script>window" not in page
        assert "<img" not in page  # the hostile tag is text; the page has no image of its own
        # The only scripts are ours, loaded from a file.
        assert re.findall(r"<script[^>]*>", page) == ['<script src="/static/dashboard.js" defer>']


async def test_hostile_filters_and_cancel_reasons_render_as_text(
    browser: Browser, client: Client, seeded: Seeded
) -> None:
    echoed = await browser.get("/chains", params={"type": '"><script>alert(1)</script>'})
    assert "<script>alert" not in echoed.text
    assert "&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in echoed.text
    chain_id = seeded.pending[2]
    response = await browser.post_from(
        f"/chains/{chain_id}", "/actions/cancel", chain_id=chain_id, reason=HOSTILE
    )
    assert response.status_code == 303
    page = (await browser.get(f"/chains/{chain_id}")).text
    assert "<script>window" not in page
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in page
    notice = await browser.get("/chains?done=retried&subject=<script>alert(1)</script>")
    assert "<script>alert" not in notice.text


# ---------------------------------------------------------------- headers and secrets


async def test_security_headers_on_pages_and_static_files(browser: Browser, seeded: Seeded) -> None:
    for path in (*PAGES, "/login"):
        headers = (await browser.get(path)).headers
        csp = headers["content-security-policy"]
        assert "script-src 'self'" in csp
        assert "unsafe-inline" not in csp
        assert "frame-ancestors 'none'" in csp
        assert headers["x-frame-options"] == "DENY"
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["cache-control"] == "no-store"
    static = await browser.get("/static/dashboard.css")
    assert static.status_code == 200
    assert "no-store" not in static.headers.get("cache-control", "")
    assert (await browser.get("/static/dashboard.js")).status_code == 200


async def test_no_secret_is_ever_rendered(client: Client, seeded: Seeded) -> None:
    web = Browser(create_app(client, settings(state_label="postgresql://app:***@db/app")))
    await web.login()
    for path in (*PAGES, f"/chains/{seeded.failed}", "/login", "/nowhere"):
        response = await web.get(path)
        assert TOKEN not in response.text, path
        assert SECRET.decode() not in response.text
    assert "postgresql://app:***@db/app" in (await web.get("/")).text
    await web.aclose()


def test_the_url_factory_masks_the_state_url_password() -> None:
    app = create_app_from_url(
        "postgresql://app:hunter2-secret@127.0.0.1:5432/test?schema=jc_dash", settings()
    )
    label = app.state.jobchain_settings.state_label
    assert label == "postgresql://app:***@127.0.0.1:5432/test?schema=jc_dash"
    assert "hunter2" not in repr(app.state.jobchain_settings)


def test_settings_hide_credentials_and_refuse_bad_ones() -> None:
    shown = repr(DashboardSettings(token="tok-123456789", username="ops", password="pw-123456789"))
    assert "tok-123456789" not in shown
    assert "pw-123456789" not in shown
    bad: list[dict[str, object]] = [
        {"token": ""},
        {"username": "ops"},
        {"password": "x"},
        {"username": "a:b", "password": "x"},
        {"token": "t", "secret_key": b"short"},
        {"token": "t", "page_size": 0},
        {"token": "t", "refresh_seconds": -1},
    ]
    for values in bad:
        with pytest.raises(InvalidArgumentError):
            DashboardSettings(**values)  # type: ignore[arg-type]
    env = {"JOBCHAIN_DASHBOARD_TOKEN": "from-env-token", "JOBCHAIN_DASHBOARD_READ_ONLY": "true"}
    loaded = DashboardSettings.from_env(env)
    assert loaded.token == "from-env-token"
    assert loaded.read_only
    with pytest.raises(InvalidArgumentError, match="READ_ONLY"):
        DashboardSettings.from_env({"JOBCHAIN_DASHBOARD_READ_ONLY": "maybe"})


# ---------------------------------------------------------------- serving in the open


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "dashboard.example.com"])
def test_a_non_loopback_address_without_credentials_is_refused(host: str) -> None:
    with pytest.raises(DashboardCredentialsError, match="JOBCHAIN_DASHBOARD_TOKEN"):
        check_bind(host, DashboardSettings(allow_anonymous=True))
    check_bind(host, DashboardSettings(token="t0ken-t0ken"))  # with credentials: fine


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_a_loopback_address_is_allowed_without_credentials(host: str) -> None:
    check_bind(host, DashboardSettings())


async def test_an_app_without_credentials_is_refused_unless_anonymous_on_purpose(client: Client) -> None:
    with pytest.raises(DashboardCredentialsError, match="allow_anonymous"):
        create_app(client, DashboardSettings())
    web = Browser(create_app(client, DashboardSettings(allow_anonymous=True)))
    assert (await web.get("/")).status_code == 200
    await web.aclose()


# ---------------------------------------------------------------- mounted in another app


async def test_mounted_under_a_path_every_link_and_cookie_carries_it(client: Client, seeded: Seeded) -> None:
    outer = Starlette(routes=[Mount("/ops/jobs", app=create_app(client, settings()))])
    web = Browser(outer)
    first = await web.get("/ops/jobs/chains")
    assert first.status_code == 303
    assert first.headers["location"] == "/ops/jobs/login?next=%2Fops%2Fjobs%2Fchains"
    assert "Path=/ops/jobs" in first.headers["set-cookie"]
    response = await web.login(path="/ops/jobs")
    assert response.status_code == 303
    assert response.headers["location"] == "/ops/jobs/"
    page = (await web.get("/ops/jobs/jobs")).text
    assert 'href="/ops/jobs/static/dashboard.css"' in page
    assert f'href="/ops/jobs/chains/{seeded.failed}#job-{seeded.failed}"' in page
    assert 'action="/ops/jobs/actions/retry"' in page
    hrefs = re.findall(r'(?:href|action)="(/[^"]*)"', page)
    assert hrefs
    assert all(h.startswith("/ops/jobs/") for h in hrefs), [
        h for h in hrefs if not h.startswith("/ops/jobs/")
    ]
    retried = await web.post_from("/ops/jobs/jobs", "/ops/jobs/actions/retry", job_id=seeded.failed)
    assert retried.status_code == 303
    assert html.unescape(retried.headers["location"]).startswith("/ops/jobs/jobs?done=retried")
    await web.aclose()
