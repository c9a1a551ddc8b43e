"""Fixtures: the shared Redis (skip locally, fail in CI when absent) and private redis-servers.

The shared server comes from ``JOBCHAIN_TEST_REDIS_URL`` (default redis://127.0.0.1:6379/0);
every test uses its own key/channel prefix. Tests that kill a broker start their own
redis-server on a free loopback port and never touch the shared one.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobchain.url import BackendURL

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def _unavailable(reason: str) -> None:
    """Skip locally; in CI a missing service is a failure, never a skip."""
    if _in_ci():
        pytest.fail(f"{reason} (CI=true: a missing service fails the run)", pytrace=False)
    pytest.skip(reason)


def _reachable(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The shared test Redis; skips (locally) or fails (CI) when it does not answer."""
    url = os.environ.get("JOBCHAIN_TEST_REDIS_URL", "").strip() or DEFAULT_REDIS_URL
    parsed = BackendURL.parse(url)
    host, port = parsed.host or "127.0.0.1", parsed.port or 6379
    if not _reachable(host, port):
        _unavailable(f"Redis not reachable at {host}:{port} (set JOBCHAIN_TEST_REDIS_URL)")
    return url


@pytest.fixture
def unique_prefix() -> str:
    return f"jobchain-test-{uuid.uuid4().hex[:12]}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrivateRedis:
    """A redis-server process of this test alone, on a free loopback port; kill and restart it."""

    def __init__(self, binary: str, directory: Path) -> None:
        self.binary = binary
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        assert self.process is None, "already running"
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60  # a starved machine starts a server slowly
        while not _reachable("127.0.0.1", self.port, timeout=0.2):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"private redis-server on port {self.port} did not start")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL: the broker vanishes without a goodbye, as in a crash."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def pause(self) -> None:
        """SIGSTOP: the server keeps its connections but answers nothing until resumed."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        self.kill()
        self.start()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.access(binary, os.X_OK):
        _unavailable("redis-server binary not found (install redis-server)")
    server = PrivateRedis(binary, tmp_path)
    server.start()
    try:
        yield server
    finally:
        if server.process is not None:
            server.resume()
        server.kill()


async def kill_clients(url: str, *, name_prefix: str) -> int:
    """``CLIENT KILL`` every connection whose client name starts with ``name_prefix``, from the
    server side (Redis itself stays up); returns how many were killed."""
    from redis.asyncio import Redis

    admin = Redis.from_url(url)
    try:
        clients = await admin.client_list()
        ids = [client["id"] for client in clients if str(client.get("name", "")).startswith(name_prefix)]
        for client_id in ids:
            await admin.client_kill_filter(_id=client_id)
        return len(ids)
    finally:
        await admin.aclose()
