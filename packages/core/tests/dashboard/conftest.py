"""Fixtures of the dashboard tests: a client over memory:// or SQLite with known jobs, the app,
and an HTTP client that talks to it in-process (httpx over ASGI, in the test's event loop)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from jobchain import Client, FailJob, JobStatus, JobTypes, Schedule, connect
from jobchain.completion import Completion
from jobchain.dashboard import DashboardSettings, create_app
from jobchain.worker import Attempt, Backoff, Completed, Processors, Worker

T = TypeVar("T")
TOKEN = "dashboard-test-token-0123456789"
SECRET = b"dashboard-test-secret-key-32-bytes!!"
BOUND = 30.0
"""Upper bound of every wait on a job state; a passing run needs a small fraction of it."""
HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
ZERO = Backoff(initial=timedelta(0), maximum=timedelta(0))


async def wait_until(probe: Callable[[], Awaitable[T | None]], what: str, bound: float = BOUND) -> T:
    """Poll ``probe`` until it returns something truthy (fails the test after ``bound`` seconds)."""
    try:
        async with asyncio.timeout(bound):
            while True:
                value = await probe()
                if value:
                    return value
                await asyncio.sleep(0.02)
    except TimeoutError:
        pytest.fail(f"timed out after {bound} s waiting for {what}")


def job_types() -> JobTypes:
    types = JobTypes()
    types.define("send_email", input=dict, output=dict, entry=True)
    types.define("resize_image", input=dict, output=dict, entry=True, continues_with=["publish_image"])
    types.define("publish_image", input=dict, output=dict)
    types.define("report", input=dict, output=dict, entry=True, blockers=["resize_image", "send_email"])
    types.define("flaky", input=dict, output=dict, entry=True)
    return types


@dataclass
class Seeded:
    """The ids of what :func:`seed` wrote, by role."""

    pending: list[str] = field(default_factory=list)
    scheduled: str = ""
    completed: str = ""
    continued: str = ""
    blocker: str = ""
    blocked: str = ""
    failed: str = ""
    hostile: str = ""


async def complete_now(client: Client, type_name: str, chain_id: str, output: Any) -> None:
    async def finish(completion: Completion[Any, Any]) -> None:
        await completion.complete(output)

    async with client.transaction() as tx:
        await client.complete_chain(tx, type_name, chain_id, finish)


async def fail_with_worker(client: Client, chain_ids: list[str]) -> None:
    """Run a worker over ``flaky`` until these chains failed (their handler raises FailJob)."""
    procs = Processors()

    @procs.handler(client.job_types.get("flaky"))
    async def fail(attempt: Attempt[dict[str, Any], dict[str, Any]]) -> Completed:
        raise FailJob(f"refused {attempt.input.get('why', '')}")

    async def all_failed() -> bool:
        jobs = [await client.get_job(i) for i in chain_ids]
        return all(j is not None and j.status is JobStatus.FAILED for j in jobs)

    async with Worker(client, procs, retry=ZERO, poll_interval=0.05):
        await wait_until(all_failed, "the flaky chains to fail")


async def seed(client: Client) -> Seeded:
    """Three due e-mails, one scheduled, one completed, a continued chain, a blocker and the
    report it blocks, and two failed chains (one with hostile input and error message)."""
    out = Seeded()
    async with client.transaction() as tx:
        for n in range(3):
            out.pending.append((await client.start_chain(tx, "send_email", {"to": f"u{n}@example.com"})).id)
        later = Schedule(after=timedelta(hours=2))
        out.scheduled = (await client.start_chain(tx, "send_email", {"to": "later"}, schedule=later)).id
        out.completed = (await client.start_chain(tx, "send_email", {"to": "done@example.com"})).id
        out.continued = (await client.start_chain(tx, "resize_image", {"px": 200})).id
        out.blocker = (await client.start_chain(tx, "resize_image", {"px": 64})).id
        out.blocked = (await client.start_chain(tx, "report", {"period": "day"}, blockers=[out.blocker])).id
        out.failed = (await client.start_chain(tx, "flaky", {"why": "plain"})).id
        out.hostile = (await client.start_chain(tx, "flaky", {"why": HOSTILE, "html": HOSTILE})).id
    await complete_now(client, "send_email", out.completed, {"sent": True})

    async def go_on(completion: Completion[Any, Any]) -> None:
        await completion.continue_with(client.job_types.get("publish_image"), {"url": "/img/1.png"})

    async with client.transaction() as tx:
        await client.complete_chain(tx, "resize_image", out.continued, go_on)
    await fail_with_worker(client, [out.failed, out.hostile])
    return out


@pytest.fixture(params=["memory", "sqlite"])
async def client(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Client]:
    """A client over memory:// or a fresh SQLite file, with the test job types."""
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'jobs.db'}"
    opened = await connect(url, notify="none", job_types=job_types(), migrate=True)
    yield opened
    await opened.close()


@pytest.fixture
async def seeded(client: Client) -> Seeded:
    return await seed(client)


def settings(**changes: Any) -> DashboardSettings:
    values: dict[str, Any] = {"token": TOKEN, "secret_key": SECRET, "refresh_seconds": 0}
    values.update(changes)
    return DashboardSettings(**values)


CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found, "the page has no CSRF token"
    return found.group(1)


class Browser:
    """An HTTP client with a cookie jar, talking to the app in-process."""

    def __init__(self, app: Any, base_url: str = "http://dash.test", address: str = "127.0.0.1") -> None:
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app, client=(address, 40000)),
            base_url=base_url,
            headers={"accept": "text/html"},
        )

    async def login(self, token: str = TOKEN, path: str = "") -> httpx.Response:
        page = await self.http.get(f"{path}/login")
        return await self.http.post(
            f"{path}/login", data={"csrf_token": csrf_of(page.text), "token": token, "next": f"{path}/"}
        )

    async def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return await self.http.get(url, **kwargs)

    async def post_from(self, page_url: str, action: str, **data: str) -> httpx.Response:
        """POST ``action`` with the CSRF token of the page at ``page_url`` (as a form on it would)."""
        page = await self.http.get(page_url)
        assert page.status_code == 200, page.text
        return await self.http.post(action, data={"csrf_token": csrf_of(page.text), "next": page_url, **data})

    async def aclose(self) -> None:
        await self.http.aclose()


@pytest.fixture
async def browser(client: Client) -> AsyncIterator[Browser]:
    """Logged in to a dashboard over ``client`` (token login through the form)."""
    web = Browser(create_app(client, settings()))
    response = await web.login()
    assert response.status_code == 303, response.text
    yield web
    await web.aclose()
