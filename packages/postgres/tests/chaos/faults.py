"""Fault injectors for the chaos cells, all aimed at private servers of this session."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import NoReturn, cast

import psycopg
import pytest

from jobchain_postgres.testing import free_port


def missing(reason: str) -> NoReturn:
    """Skip for a missing server binary; fail under CI=true (CI must never pass by skipping)."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: a missing binary is a failure)", pytrace=False)
    pytest.skip(reason)


def conninfo(port: int, database: str) -> str:
    return f"host=127.0.0.1 port={port} dbname={database} user=postgres connect_timeout=5"


async def terminate_backends(port: int, database: str) -> int:
    """``pg_terminate_backend`` every other backend of ``database`` (from a superuser connection
    to the ``postgres`` database); returns how many were terminated."""
    async with await psycopg.AsyncConnection.connect(conninfo(port, "postgres"), autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        )
        row = await cursor.fetchone()
        return int(row[0]) if row else 0


class ConnectionHog:
    """Opens connections until only ``leave_free`` of the server's slots remain, and holds them.

    They go to the ``postgres`` database: slots are server-wide, and terminating the backends
    of the cell's database then leaves the hog's own connections alone.
    """

    def __init__(self, port: int, *, leave_free: int = 2) -> None:
        self.port = port
        self.database = "postgres"
        self.leave_free = leave_free
        self.held: list[psycopg.Connection[tuple[object, ...]]] = []

    def grab(self) -> int:
        """Take the connections; returns how many are held."""
        with psycopg.connect(conninfo(self.port, "postgres"), autocommit=True) as probe:
            row = probe.execute(
                "SELECT current_setting('max_connections')::int, (SELECT count(*) FROM pg_stat_activity "
                "WHERE backend_type = 'client backend')"
            ).fetchone()
        assert row is not None
        max_connections, used = int(row[0]), int(row[1])
        wanted = max(0, max_connections - used - self.leave_free)  # the probe's slot frees on exit
        for _ in range(wanted):
            try:
                self.held.append(psycopg.connect(conninfo(self.port, self.database), autocommit=True))
            except psycopg.OperationalError:
                break  # somebody else took the last slots: we hold as many as we could
        return len(self.held)

    def terminate(self, database: str) -> int:
        """Terminate every backend of ``database`` through a held connection (no free slot needed)."""
        assert self.held, "grab first"
        row = (
            self.held[0]
            .execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = %s",
                (database,),
            )
            .fetchone()
        )
        return int(cast(int, row[0])) if row else 0

    def release(self) -> None:
        for conn in self.held:
            conn.close()
        self.held.clear()


def _reachable(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class PrivateBroker:
    """A redis-server or nats-server of this test on a free loopback port; kill it and start it
    again on the same port."""

    def __init__(self, kind: str, directory: Path) -> None:
        binary = shutil.which("redis-server" if kind == "redis" else "nats-server")
        if binary is None:
            raise RuntimeError(f"the {kind} server is not installed")
        self.kind = kind
        self.binary = binary
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0" if self.kind == "redis" else f"nats://127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        if self.kind == "redis":
            return [
                *(self.binary, "--port", str(self.port), "--bind", "127.0.0.1"),
                *("--save", "", "--appendonly", "no", "--dir", str(self.directory)),
            ]
        return [self.binary, "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(self.directory)]

    def start(self) -> None:
        assert self.process is None, "already running"
        self.process = subprocess.Popen(self._command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not _reachable(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"private {self.kind} server on port {self.port} did not start")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL: the broker vanishes without a goodbye, as in a crash."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
