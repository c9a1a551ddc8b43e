"""Issue 34, finding 9: the login throttle keys on the peer's address. ``X-Forwarded-For`` is
believed only from the proxies the operator names (``--forwarded-allow-ips``), so a guesser
on loopback (or anywhere) cannot reset the throttle by rotating the header.

The servers are real uvicorn servers on loopback, configured as ``jobchain dashboard``
configures them; the throttle's clock is frozen, so no wall-clock window is involved."""

from __future__ import annotations

import asyncio
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn
from click.testing import CliRunner

from jobchain import Client, JobTypes, connect
from jobchain.cli import main
from jobchain.cli.dashboard import server_config
from jobchain.dashboard import create_app
from jobchain.dashboard.security import FailedLogins

from .conftest import TOKEN, settings

BOUND = 60.0
"""Upper bound of every wait on a server; a passing run needs a fraction of a second."""
LIMIT = 3


@pytest.fixture
async def memory_client() -> AsyncIterator[Client]:
    opened = await connect("memory://", notify="none", job_types=JobTypes(), migrate=True)
    yield opened
    await opened.close()


@asynccontextmanager
async def serving(client: Client, forwarded_allow_ips: str | None) -> AsyncIterator[tuple[str, FailedLogins]]:
    """A real uvicorn server (the CLI's configuration) on a loopback port; its base URL and
    the app's throttle, whose clock never moves."""
    app = create_app(client, settings())
    failures = FailedLogins(limit=LIMIT, window=60.0, clock=lambda: 0.0)
    app.state.jobchain_guard.failures = failures
    config = server_config(
        app, host="127.0.0.1", port=0, root_path="", forwarded_allow_ips=forwarded_allow_ips
    )
    config.log_level = "warning"
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(BOUND):
            while not server.started:
                assert not task.done(), "uvicorn stopped before it served"
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}", failures
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, BOUND)


def _http(base: str) -> httpx.AsyncClient:
    # trust_env=False: a proxy in the environment must not stand between the test and loopback.
    return httpx.AsyncClient(base_url=base, trust_env=False, headers={"accept": "*/*"})


async def _guess(http: httpx.AsyncClient, forwarded_for: str, token: str = "guess") -> int:
    headers = {"authorization": f"Bearer {token}", "x-forwarded-for": forwarded_for}
    return (await http.get("/", headers=headers)).status_code


async def test_rotating_x_forwarded_for_does_not_reset_the_throttle_by_default(memory_client: Client) -> None:
    async with serving(memory_client, None) as (base, failures), _http(base) as http:
        for n in range(LIMIT):
            assert await _guess(http, f"198.51.100.{n}") == 401
        assert await _guess(http, "198.51.100.99", TOKEN) == 429
        assert failures.blocked("127.0.0.1")
        assert not failures.blocked("198.51.100.0")


async def test_a_named_proxy_s_forwarded_address_is_the_client(memory_client: Client) -> None:
    async with serving(memory_client, "127.0.0.1") as (base, failures), _http(base) as http:
        for _ in range(LIMIT):
            assert await _guess(http, "203.0.113.7") == 401
        assert await _guess(http, "203.0.113.7", TOKEN) == 429
        assert failures.blocked("203.0.113.7")
        assert not failures.blocked("127.0.0.1")
        assert await _guess(http, "203.0.113.8", TOKEN) == 200  # another client behind the proxy


async def test_a_proxy_that_is_not_named_is_not_believed(memory_client: Client) -> None:
    async with serving(memory_client, "192.0.2.1") as (base, failures), _http(base) as http:
        for n in range(LIMIT):
            assert await _guess(http, f"198.51.100.{n}") == 401
        assert await _guess(http, "198.51.100.99", TOKEN) == 429
        assert failures.blocked("127.0.0.1")


def test_an_empty_forwarded_allow_ips_is_refused_in_one_line() -> None:
    result = CliRunner().invoke(main, ["dashboard", "--state", "memory://", "--forwarded-allow-ips", " , "])
    assert result.exit_code == 2
    assert "--forwarded-allow-ips" in result.output
    assert "at least one" in result.output


# ---------------------------------------------------------------- the command itself


@contextmanager
def _dashboard_process(
    tmp_path: Path, *options: str
) -> Iterator[tuple[str, subprocess.Popen[str], queue.Queue[str]]]:
    """``jobchain dashboard`` as a subprocess on a free port: its base URL and its access log."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    assert CliRunner().invoke(main, ["migrate", "--state", url]).exit_code == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCHAIN_DASHBOARD_")}
    env.pop("FORWARDED_ALLOW_IPS", None)  # uvicorn's own variable: this test decides
    env["JOBCHAIN_DASHBOARD_TOKEN"] = TOKEN
    port = _free_port()
    command = [sys.executable, "-m", "jobchain.cli", "dashboard", "--state", url, "--port", str(port)]
    process = subprocess.Popen(
        [*command, *options], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    lines: queue.Queue[str] = queue.Queue()
    output = process.stdout
    assert output is not None

    def pump() -> None:
        for line in output:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{port}", process, lines
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=BOUND) == 0


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _get_when_up(base: str, process: subprocess.Popen[str], headers: dict[str, str]) -> int:
    deadline = time.monotonic() + BOUND
    with httpx.Client(base_url=base, trust_env=False) as http:
        while True:
            try:
                return http.get("/login", headers=headers).status_code
            except httpx.TransportError:
                assert process.poll() is None, "the dashboard exited instead of serving"
                assert time.monotonic() < deadline, "the dashboard did not start serving"
                time.sleep(0.05)


def _access_line(lines: queue.Queue[str], path: str) -> str:
    deadline = time.monotonic() + BOUND
    while True:
        line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        if f'"GET {path} HTTP/1.1"' in line:
            return line


@pytest.mark.parametrize(
    ("options", "logged_client"),
    [((), "127.0.0.1"), (("--forwarded-allow-ips", "127.0.0.1,192.0.2.1"), "203.0.113.9")],
)
def test_the_command_believes_x_forwarded_for_only_from_named_proxies(
    tmp_path: Path, options: tuple[str, ...], logged_client: str
) -> None:
    with _dashboard_process(tmp_path, *options) as (base, process, lines):
        assert _get_when_up(base, process, {"x-forwarded-for": "203.0.113.9"}) == 200
        line = _access_line(lines, "/login")
        assert re.search(rf"\b{re.escape(logged_client)}:\d+ - ", line), line
