"""The dashboard in a real browser: Debian's Chromium driven by Playwright, against the app
served by uvicorn on a free loopback port, over real SQLite and real PostgreSQL state, with a
real worker in the same event loop.

Every wait is on a page condition (Playwright's auto-waiting ``expect``) or on a job state
(polling with a generous bound): never a fixed sleep. Without /usr/bin/chromium (or without
PostgreSQL) the tests skip, unless ``CI=true``, where they fail.

``JOBCHAIN_DASHBOARD_SCREENSHOTS=docs/images`` keeps screenshots of the main pages
(``dashboard-*.png``; the docs' images are made this way, from the SQLite run).
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import pytest
import uvicorn

from jobchain import Client, FailJob, JobStatus, Schedule, connect
from jobchain.completion import Completion
from jobchain.dashboard import create_app_from_url
from jobchain.url import BackendURL
from jobchain.worker import AbortReason, Attempt, Completed, Processors, Worker

from .conftest import BOUND, HOSTILE, TOKEN, ZERO, complete_now, job_types, settings, wait_until

pytestmark = [pytest.mark.timeout(300)]

CHROMIUM: Final = "/usr/bin/chromium"
WIDTH: Final = 1400
EXPECT_MS: Final = 30_000


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def _skip_or_fail(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"{reason}; CI=true: a missing browser or server fails the run", pytrace=False)
    pytest.skip(reason)


def _chromium_or_skip() -> None:
    try:
        import playwright.async_api  # noqa: F401 -- only whether it is installed
    except ImportError:
        _skip_or_fail("playwright is not installed (pip install -r requirements-dev.txt)")
    if not Path(CHROMIUM).is_file():
        _skip_or_fail(f"no Chromium at {CHROMIUM} (apt-get install chromium)")


def _with_password(url: str) -> str:
    """``url`` with a password, if it has none: the test server trusts loopback and ignores
    it, and the pages must never show it."""
    parsed = BackendURL.parse(url)
    if parsed.password is not None or parsed.username is None:
        return url
    return url.replace(f"//{parsed.username}@", f"//{parsed.username}:dashboard-pw-d41d8cd9@", 1)


@dataclass
class Stack:
    """A dashboard served on loopback, a worker-side client on the same state, and a browser."""

    backend: str
    base: str
    state_url: str
    password: str | None
    client: Client
    page: Any
    dialogs: list[str]
    errors: list[str]
    """Console errors and failed page requests (a CSP violation is one)."""


@pytest.fixture(params=["sqlite", "postgresql"])
async def stack(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stack]:
    _chromium_or_skip()
    from playwright.async_api import async_playwright, expect

    schema = None
    if request.param == "sqlite":
        state_url = f"sqlite:///{tmp_path / 'dashboard.db'}"
        notify_url = f"memory://dashboard-{uuid.uuid4().hex[:12]}"  # one process: the in-process broker
    else:
        server = request.getfixturevalue("postgres_server")
        drop = request.getfixturevalue("drop_postgres_schema")  # not during teardown: deprecated
        schema = f"jc_dash_{uuid.uuid4().hex[:12]}"
        secret = _with_password(server)
        state_url = f"{secret}?schema={schema}"
        notify_url = secret  # LISTEN/NOTIFY
    client = await connect(state_url, notify=notify_url, job_types=job_types(), migrate=True)
    app = create_app_from_url(state_url, settings(), notify=notify_url)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    try:
        await wait_until(lambda: _started(server), "uvicorn to start")
        expect.set_options(timeout=EXPECT_MS)
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                page = await browser.new_page(viewport={"width": WIDTH, "height": 900})
                page.set_default_timeout(EXPECT_MS)
                dialogs: list[str] = []

                async def accept(dialog: Any) -> None:
                    dialogs.append(dialog.message)
                    await dialog.accept()

                page.on("dialog", accept)
                errors: list[str] = []
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                password = BackendURL.parse(state_url).password
                base = f"http://127.0.0.1:{port}"
                yield Stack(request.param, base, state_url, password, client, page, dialogs, errors)
            finally:
                await browser.close()
    finally:
        server.should_exit = True
        await serving
        listener.close()
        await client.close()
        if schema is not None:
            drop(schema)


async def _started(server: uvicorn.Server) -> bool:
    return server.started


async def login(stack: Stack, path: str = "/") -> None:
    from playwright.async_api import expect

    page = stack.page
    await page.goto(stack.base + path)
    await expect(page).to_have_url(f"{stack.base}/login?next={path.replace('/', '%2F')}")
    await page.fill('input[name="token"]', TOKEN)
    await page.click('button[type="submit"]')
    await expect(page).to_have_url(stack.base + path)


def screenshot_dir(stack: Stack) -> Path | None:
    target = os.environ.get("JOBCHAIN_DASHBOARD_SCREENSHOTS")
    return Path(target) if target and stack.backend == "sqlite" else None


async def shoot(stack: Stack, name: str) -> bytes:
    """A screenshot of the page, kept as ``dashboard-<name>.png`` when asked for."""
    png: bytes = await stack.page.screenshot(full_page=False)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    folder = screenshot_dir(stack)
    if folder is not None:
        (folder / f"dashboard-{name}.png").write_bytes(png)
    return png


async def status_of(client: Client, job_id: str) -> JobStatus | None:
    job = await client.get_job(job_id)
    return None if job is None else job.status


# ---------------------------------------------------------------- the tests


async def test_the_overview_shows_the_right_counts(stack: Stack) -> None:
    from playwright.async_api import expect

    client = stack.client
    async with client.transaction() as tx:
        for n in range(3):
            await client.start_chain(tx, "send_email", {"to": f"u{n}@example.com"})
        later = Schedule(after=timedelta(hours=1))
        await client.start_chain(tx, "send_email", {"to": "later"}, schedule=later)
        done = (await client.start_chain(tx, "send_email", {"to": "done"})).id
        await client.start_chain(tx, "resize_image", {"px": 64})
    await complete_now(client, "send_email", done, {"sent": True})
    await login(stack)
    page = stack.page
    emails = page.locator('tr[data-type="send_email"]')
    await expect(emails.locator('[data-count="due"]')).to_have_text("3")
    await expect(emails.locator('[data-count="scheduled"]')).to_have_text("1")
    await expect(emails.locator('[data-count="completed"]')).to_have_text("1")
    await expect(page.locator('tr[data-type="resize_image"] [data-count="due"]')).to_have_text("1")
    await expect(page.locator('[data-figure="due"]')).to_have_text("4")
    await expect(page.locator("svg.chart title").first).to_contain_text("1 completed")


async def test_a_failed_job_is_retried_from_the_page_and_then_completes(stack: Stack) -> None:
    from playwright.async_api import expect

    client = stack.client
    calls: list[int] = []
    procs = Processors()

    @procs.handler(client.job_types.get("flaky"))
    async def flaky(attempt: Attempt[dict[str, Any], dict[str, Any]]) -> Completed:
        calls.append(attempt.job.attempt)
        if len(calls) == 1:
            raise FailJob("the upstream said no")
        return await attempt.complete({"ok": True})

    async with client.transaction() as tx:
        chain_id = (await client.start_chain(tx, "flaky", {"order": 42})).id
    async with Worker(client, procs, retry=ZERO, poll_interval=0.2):
        await wait_until(lambda: _is(client, chain_id, JobStatus.FAILED), "the first attempt to fail")
        await login(stack, "/jobs")
        page = stack.page
        row = page.locator(f'tr[data-job="{chain_id}"]')
        await expect(row).to_contain_text("the upstream said no")
        await row.locator('button[data-action="retry"]').click()
        await expect(page.locator(".notice")).to_have_text(f"Job {chain_id} retried.")
        await wait_until(lambda: _is(client, chain_id, JobStatus.COMPLETED), "the retried job to complete")
    assert len(calls) == 2
    await page.goto(f"{stack.base}/chains/{chain_id}")
    await expect(page.locator("h1 .status")).to_have_text("completed")
    await expect(page.locator('pre[data-field="output"]')).to_contain_text('"ok": true')
    await expect(page.locator(".attempt-error")).to_contain_text("the upstream said no")


async def test_a_cancel_from_the_page_aborts_the_running_job(stack: Stack) -> None:
    from playwright.async_api import expect

    client = stack.client
    started = asyncio.Event()
    reasons: list[AbortReason] = []
    procs = Processors()

    @procs.handler(client.job_types.get("resize_image"))
    async def slow(attempt: Attempt[dict[str, Any], dict[str, Any]]) -> Completed:
        await attempt.prepare("staged")
        started.set()
        async with asyncio.timeout(BOUND * 4):
            reasons.append(await attempt.signal.wait())
        return await attempt.complete({"px": 0})  # refused: the chain is cancelled

    async with client.transaction() as tx:
        chain_id = (await client.start_chain(tx, "resize_image", {"px": 4096})).id
    async with Worker(client, procs, name="image-worker", retry=ZERO, poll_interval=0.2):
        async with asyncio.timeout(BOUND):
            await started.wait()
        await login(stack, "/workers")
        page = stack.page
        held = page.locator(f'tr[data-job="{chain_id}"]')
        await expect(held).to_contain_text("resize_image")
        await held.locator('button[data-action="cancel"]').click()
        await expect(page.locator(".notice")).to_have_text(f"Chain {chain_id} cancelled.")
        assert stack.dialogs == ["Cancel this chain? A running attempt is aborted."]  # our script ran
        await wait_until(lambda: _true(bool(reasons)), "the handler's abort signal")
    assert reasons == [AbortReason.CANCELLED]
    assert await status_of(client, chain_id) is JobStatus.CANCELLED


async def test_a_hostile_input_renders_inert(stack: Stack) -> None:
    from playwright.async_api import expect

    client = stack.client
    procs = Processors()

    @procs.handler(client.job_types.get("flaky"))
    async def fail(attempt: Attempt[dict[str, Any], dict[str, Any]]) -> Completed:
        raise FailJob(HOSTILE)

    async with client.transaction() as tx:
        chain_id = (await client.start_chain(tx, "flaky", {"name": HOSTILE})).id
    async with Worker(client, procs, retry=ZERO, poll_interval=0.2):
        await wait_until(lambda: _is(client, chain_id, JobStatus.FAILED), "the hostile job to fail")
    await login(stack, f"/chains/{chain_id}")
    page = stack.page
    await expect(page.locator('pre[data-field="input"]')).to_contain_text(
        '"name": "<script>window.__pwned = 1</script>'
    )
    await expect(page.locator(".attempt-error pre.message")).to_have_text(HOSTILE)
    for path in (f"/chains/{chain_id}", "/jobs", "/"):
        await page.goto(stack.base + path)
        await expect(page.locator("main")).to_be_visible()
        assert await page.evaluate("() => window.__pwned === undefined"), f"script ran on {path}"
        assert await page.locator("main img").count() == 0


async def test_an_unauthenticated_request_is_refused(stack: Stack) -> None:
    from playwright.async_api import expect

    page = stack.page
    for path in ("/", "/chains", "/jobs", "/workers"):
        await page.goto(stack.base + path)
        await expect(page).to_have_url(f"{stack.base}/login?next={path.replace('/', '%2F')}")
        await expect(page.locator('input[name="token"]')).to_be_visible()
    api = await page.request.get(f"{stack.base}/chains", headers={"accept": "application/json"})
    assert api.status == 401
    action = await page.request.post(
        f"{stack.base}/actions/cancel", form={"chain_id": str(uuid.uuid4()), "csrf_token": "x"}
    )
    assert action.status == 401
    await page.fill('input[name="token"]', "not-the-token")
    await page.click('button[type="submit"]')
    await expect(page.locator(".error")).to_have_text("Wrong credentials.")


async def test_the_main_pages_render_whole_in_chromium(stack: Stack) -> None:
    """A realistic scene on every main page: no overflow, nothing broken; screenshots kept."""
    from playwright.async_api import expect

    client = stack.client
    scene = await _scene(stack)
    procs = Processors()
    hold = asyncio.Event()

    @procs.handler(client.job_types.get("resize_image"))
    async def resize(attempt: Attempt[dict[str, Any], dict[str, Any]]) -> Completed:
        await attempt.prepare("staged")
        async with asyncio.timeout(BOUND * 4):
            await hold.wait()
        return await attempt.complete({"px": 0})

    async with Worker(client, procs, name="images-1", concurrency=2, poll_interval=0.2):
        await wait_until(lambda: _running(client, 2), "two images to be held by the worker")
        await login(stack)
        page = stack.page
        try:
            await expect(page.locator('tr[data-type="send_email"] [data-count="completed"]')).to_have_text(
                "24"
            )
            await _check_page(stack, "overview")
            await page.goto(f"{stack.base}/chains")
            await expect(page.locator("tr[data-chain]").first).to_be_visible()
            await _check_page(stack, "chains")
            await page.goto(f"{stack.base}/chains/{scene['report']}")
            await expect(page.locator("svg.graph .node")).to_have_count(4)
            await _check_page(stack, "chain")
            await page.goto(f"{stack.base}/jobs?status=failed")
            await expect(page.locator("tr[data-job]")).to_have_count(3)
            await _check_page(stack, "failed-jobs")
            await page.goto(f"{stack.base}/workers")
            await expect(page.locator("section.worker tr[data-job]")).to_have_count(2)
            await _check_page(stack, "workers")
        finally:
            hold.set()


# ---------------------------------------------------------------- helpers


async def _is(client: Client, job_id: str, status: JobStatus) -> bool:
    return await status_of(client, job_id) is status


async def _true(value: bool) -> bool:
    return value


async def _running(client: Client, count: int) -> bool:
    return len((await client.list_jobs(statuses=["running"])).items) >= count


FACTS: Final = """() => ({
    scrollWidth: document.documentElement.scrollWidth,
    widest: Math.max(...[...document.body.querySelectorAll('*')].map(e => e.getBoundingClientRect().right)),
    stylesheet: getComputedStyle(document.documentElement).backgroundColor,
})"""


async def _check_page(stack: Stack, name: str) -> None:
    if stack.password:
        content = await stack.page.content()
        assert stack.password not in content, f"{name} shows the state URL's password"
        assert ":***@" in content  # the URL is shown, masked
    assert stack.errors == [], f"{name}: console errors {stack.errors}"
    facts = await stack.page.evaluate(FACTS)
    assert facts["scrollWidth"] <= WIDTH, f"{name} overflows: {facts['scrollWidth']} px wide"
    assert facts["stylesheet"] == "rgb(245, 246, 248)", "the stylesheet did not load"
    await shoot(stack, name)


async def _scene(stack: Stack) -> dict[str, str]:
    """E-mails sent over the last hour, images in progress, a report blocked by two chains,
    three dead letters with real tracebacks.

    The e-mails are started and completed by a client whose clock is moved back through the
    last hour (an injected clock, as tests do), so the throughput chart has an hour of history.
    """
    client = stack.client
    moment = [datetime.now(UTC) - timedelta(minutes=58)]
    # Another client over the same opened state adapter, with the moved clock (not closed:
    # closing it would close the adapter the test's client shares).
    past = Client(client.state, None, client.job_types, clock=lambda: moment[0])
    emails: list[str] = []
    for n in range(30):
        moment[0] += timedelta(seconds=50 + (n * 37) % 90)
        async with past.transaction() as tx:
            emails.append((await past.start_chain(tx, "send_email", {"to": f"user{n}@example.com"})).id)
        if n < 24:
            moment[0] += timedelta(seconds=5 + n % 7)
            await complete_now(past, "send_email", emails[-1], {"sent": True})
    failing = Processors()

    @failing.handler(client.job_types.get("flaky"))
    async def flaky(attempt: Attempt[dict[str, Any], dict[str, Any]]) -> Completed:
        if attempt.input["n"] == 0:
            raise FailJob("card declined by the issuer")
        try:
            {}["customer"]
        except KeyError as exc:
            raise RuntimeError(f"CRM rejected record {attempt.input['n']}: status 422") from exc
        raise AssertionError("unreachable")

    ids: dict[str, str] = {}
    async with client.transaction() as tx:
        resized = (await client.start_chain(tx, "resize_image", {"px": 128})).id

    async def publish(completion: Completion[Any, Any]) -> None:
        await completion.continue_with(client.job_types.get("publish_image"), {"url": "/img/128.png"})

    async with client.transaction() as tx:  # resized, now waiting to be published
        await client.complete_chain(tx, "resize_image", resized, publish)
    async with client.transaction() as tx:
        images = [(await client.start_chain(tx, "resize_image", {"px": 256 * (n + 1)})).id for n in range(2)]
        blockers = [resized, images[0], emails[0]]
        ids["report"] = (await client.start_chain(tx, "report", {"period": "2026-11"}, blockers=blockers)).id
        flaky_ids = [(await client.start_chain(tx, "flaky", {"n": n})).id for n in range(3)]
    async with Worker(client, failing, retry=ZERO, poll_interval=0.2, max_attempts=2):
        for chain_id in flaky_ids:
            await wait_until(lambda c=chain_id: _is(client, c, JobStatus.FAILED), "the flaky chains to fail")
    return ids
