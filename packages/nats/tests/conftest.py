"""Fixtures: the shared NATS (skip locally, fail in CI when absent) and private nats-servers.

The shared server comes from ``JOBCHAIN_TEST_NATS_URL`` (default nats://127.0.0.1:4222);
every test uses its own subject prefix and its own KV bucket name (the bucket is deleted
after the test). Tests that kill a broker start their own nats-server on a free loopback
port and never touch the shared one.

While a session uses KV buckets on the shared server it keeps a small file-backed sentinel
stream of its own there. nats-server removes an account's store directory, from a goroutine
of its own, after the account's last stream is deleted; a stream created meanwhile (another
xdist worker's bucket, another run's) fails with "error creating store for stream". With a
sentinel stored in that directory it is never empty, so the server never removes it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import nats.js.api
import nats.js.errors
import pytest

from jobchain.url import BackendURL
from jobchain_nats.wake_hints import retry_transient

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"


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
def nats_url() -> str:
    """The shared test NATS; skips (locally) or fails (CI) when it does not answer."""
    url = os.environ.get("JOBCHAIN_TEST_NATS_URL", "").strip() or DEFAULT_NATS_URL
    parsed = BackendURL.parse(url)
    host, port = parsed.host or "127.0.0.1", parsed.port or 4222
    if not _reachable(host, port):
        _unavailable(f"NATS not reachable at {host}:{port} (set JOBCHAIN_TEST_NATS_URL)")
    return url


@pytest.fixture(scope="session")
def jetstream_sentinel(nats_url: str) -> Iterator[str]:
    """A file-backed stream kept on the shared server for the session (see the module doc).

    One per xdist worker: each worker is a session of its own. Its creation is the one create
    that can still meet another run's last delete, so it retries like the adapter does.
    """
    name = f"jobchain_test_sentinel_{uuid.uuid4().hex[:12]}"

    async def create() -> None:
        nc = await nats.connect(nats_url)
        try:
            js = nc.jetstream(timeout=10)
            config = nats.js.api.StreamConfig(
                name=name,
                subjects=[f"jobchain-test-sentinel.{name}"],
                storage=nats.js.api.StorageType.FILE,
                description="jobchain tests: keeps the account's store directory while they run",
            )
            await retry_transient(lambda: js.add_stream(config), f"the creation of stream {name}", nats_url)
        finally:
            await nc.close()

    async def delete() -> None:
        nc = await nats.connect(nats_url)
        try:
            await nc.jetstream(timeout=10).delete_stream(name)
        except nats.js.errors.NotFoundError:
            pass
        finally:
            await nc.close()

    asyncio.run(create())
    yield name
    asyncio.run(delete())


@pytest.fixture
def kv_bucket_name() -> str:
    """A KV bucket name unique to this test: no name is deleted and created again in a hurry."""
    return f"jobchain_test_{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def kv_bucket(nats_url: str, kv_bucket_name: str, jetstream_sentinel: str) -> AsyncIterator[str]:
    """The test's bucket name; the adapter creates it (kv_create) and this deletes it after."""
    yield kv_bucket_name
    nc = await nats.connect(nats_url)
    try:
        await nc.jetstream().delete_key_value(kv_bucket_name)
    except nats.js.errors.NotFoundError:
        pass
    finally:
        await nc.close()


@pytest.fixture
def unique_prefix() -> str:
    return f"jobchain-test-{uuid.uuid4().hex[:12]}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrivateNats:
    """A nats-server (JetStream on, file store kept across restarts) of this test alone."""

    def __init__(self, binary: str, directory: Path) -> None:
        self.binary = binary
        self.directory = directory
        self.port = free_port()
        self.monitor_port = free_port()
        self.jetstream = True
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        assert self.process is None, "already running"
        self.process = subprocess.Popen(
            [
                self.binary,
                "-a",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-m",
                str(self.monitor_port),
                *(["-js", "-sd", str(self.directory)] if self.jetstream else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60  # a starved machine starts a server slowly
        while not (
            _reachable("127.0.0.1", self.port, 0.2) and _reachable("127.0.0.1", self.monitor_port, 0.2)
        ):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"private nats-server on port {self.port} did not start")
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

    def connz(self) -> dict[str, Any]:
        """The monitoring endpoint's view of client connections and their subscriptions."""
        url = f"http://127.0.0.1:{self.monitor_port}/connz?subs=1"
        with urllib.request.urlopen(url, timeout=5) as response:
            data: dict[str, Any] = json.load(response)
        return data


@pytest.fixture
def private_nats(tmp_path: Path) -> Iterator[PrivateNats]:
    binary = shutil.which("nats-server") or "/usr/sbin/nats-server"
    if not os.access(binary, os.X_OK):
        _unavailable("nats-server binary not found (install nats-server)")
    server = PrivateNats(binary, tmp_path)
    server.start()
    try:
        yield server
    finally:
        if server.process is not None:
            server.resume()  # a stopped process ignores SIGKILL until continued on some kernels
        server.kill()
