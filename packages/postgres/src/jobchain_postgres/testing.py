"""Test helpers: a scratch schema per test, and a PostgreSQL server of your own.

``scratch(url)`` (the ``scratch`` behind ``postgresql://``, what
:func:`jobchain.testing.scratch_database` calls) creates a new schema on the server of ``url``
and yields the URL selecting it; at exit the schema is dropped with everything in it.

A server of your own, for tests that stop, restart or reconfigure it.

Fault tests and benchmarks must never touch a shared server: ``PrivateServer`` runs
``initdb`` into a temporary directory and ``pg_ctl`` on a free loopback port, with trust
authentication and the settings you pass, and removes everything on ``close()``::

    with PrivateServer(settings={"autovacuum": "on"}) as server:
        client = await jobchain.connect(server.url, ...)
        server.stop("immediate")   # a crash
        server.start()             # recovery

The server binaries are found with ``pg_config --bindir``, then under
``/usr/lib/postgresql/*/bin``, then on ``PATH``. PostgreSQL refuses to run as root; when
the process is root, the cluster runs as the ``postgres`` system user (through ``runuser``).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Final, Literal

from jobchain.errors import BackendUnreachableError, JobchainError
from jobchain.url import BackendURL

StopMode = Literal["smart", "fast", "immediate"]

DEFAULT_SETTINGS: Final[Mapping[str, str]] = {
    "fsync": "off",  # a test cluster need not survive a power cut; a crash (immediate stop) it does
    "max_connections": "200",
    "shared_buffers": "128MB",
}
_TIMEOUT: Final = 120.0
_PORT_ATTEMPTS: Final = 5


_SCRATCH_CONNECT_TIMEOUT: Final = 30.0
_SCRATCH_LOCK_TIMEOUT: Final = "60s"


@contextmanager
def scratch(url: BackendURL) -> Iterator[str]:
    """A new schema ``jobchain_scratch_<hex>`` on ``url``'s server, dropped (CASCADE) at exit.

    The yielded URL is ``url`` with ``?schema=`` set to it (its other options kept). Close the
    clients that used it first: the drop waits up to a minute for their locks, then fails
    naming the schema to drop yourself.
    """
    # Imported here: the private-server helpers below need no driver.
    import psycopg
    from psycopg import sql

    from jobchain_postgres.options import target

    name = f"jobchain_scratch_{uuid.uuid4().hex[:16]}"
    place = target(url, _SCRATCH_CONNECT_TIMEOUT)
    schema = sql.Identifier(name)
    try:
        with psycopg.connect(place.conninfo, autocommit=True) as connection:
            connection.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
    except psycopg.Error as exc:
        raise BackendUnreachableError(
            f"{place.display}: cannot create a scratch schema: {str(exc).strip()}"
        ) from None
    try:
        yield replace(url, query={**url.query, "schema": name}).render(hide_password=False)
    finally:
        try:
            with psycopg.connect(place.conninfo, autocommit=True) as connection:
                lock_timeout = sql.SQL("SET lock_timeout = {}").format(sql.Literal(_SCRATCH_LOCK_TIMEOUT))
                connection.execute(lock_timeout)
                connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(schema))
        except psycopg.Error as exc:
            raise BackendUnreachableError(
                f"{place.display}: cannot drop scratch schema {name} ({str(exc).strip()}); "
                f"close the clients that used it, then DROP SCHEMA {name} CASCADE"
            ) from None


class PrivateServerError(JobchainError):
    """A private PostgreSQL server could not be created, started or stopped."""


def _bindir() -> Path:
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        found = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        candidate = Path(found.stdout.strip())
        if found.returncode == 0 and (candidate / "initdb").exists():
            return candidate
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    if versions:
        return Path(versions[-1])
    initdb = shutil.which("initdb")
    if initdb is not None:
        return Path(initdb).parent
    raise PrivateServerError("PostgreSQL's server binaries (initdb, pg_ctl) are not installed")


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PrivateServer:
    """A throw-away PostgreSQL cluster on 127.0.0.1 (see the module doc)."""

    def __init__(self, *, settings: Mapping[str, str] | None = None, database: str = "test") -> None:
        self.settings = {**DEFAULT_SETTINGS, **(settings or {})}
        self.database = database
        self.port = free_port()
        self._bin = _bindir()
        self._root = Path(tempfile.mkdtemp(prefix="jobchain-pg-"))
        self.data_dir = self._root / "data"
        self.log_file = self._root / "server.log"
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            self._as_user = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self._root, "postgres", "postgres")
        self._initialized = False

    @property
    def url(self) -> str:
        """``postgresql://postgres@127.0.0.1:PORT/DATABASE``."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{self.database}"

    def _run(self, tool: str, *args: str) -> None:
        command = [*self._as_user, str(self._bin / tool), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT, check=False)
        if done.returncode != 0:
            log = self.log_file.read_text(errors="replace")[-2000:] if self.log_file.exists() else ""
            raise PrivateServerError(f"{tool} failed ({done.returncode}): {done.stderr.strip()}\n{log}")

    def start(self) -> None:
        """Create the cluster on first use, then start it and wait until it accepts connections."""
        if not self._initialized:
            self._run("initdb", "-D", str(self.data_dir), "-A", "trust", "-U", "postgres", "-E", "UTF8")
            with (self.data_dir / "postgresql.conf").open("a") as conf:
                conf.write(f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\n")
                conf.write(f"unix_socket_directories = '{self._root}'\n")
                conf.writelines(f"{key} = '{value}'\n" for key, value in self.settings.items())
        for attempt in range(_PORT_ATTEMPTS):
            try:
                self._run(
                    "pg_ctl", "-D", str(self.data_dir), "-l", str(self.log_file), "-w", "-t", "120", "start"
                )
                break
            except PrivateServerError as exc:
                # free_port() cannot reserve the port: another process may bind it before the
                # postmaster does. Move to a new port (the last `port` line of the file wins).
                if "already in use" not in str(exc) or attempt == _PORT_ATTEMPTS - 1:
                    raise
                self.port = free_port()
                with (self.data_dir / "postgresql.conf").open("a") as conf:
                    conf.write(f"port = {self.port}\n")
        if not self._initialized:
            self._initialized = True
            self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", self.database)

    def stop(self, mode: StopMode = "fast") -> None:
        """Stop the server: ``fast`` disconnects clients cleanly, ``immediate`` is a crash."""
        self._run("pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "-t", "120", "stop")

    def restart(self, mode: StopMode = "fast") -> None:
        """Stop with ``mode``, then start again on the same port."""
        self.stop(mode)
        self.start()

    def running(self) -> bool:
        """True while the postmaster's pid file exists."""
        return (self.data_dir / "postmaster.pid").exists()

    def close(self) -> None:
        """Stop the server if it runs and delete its directory."""
        try:
            if self._initialized and self.running():
                self.stop("immediate")
        finally:
            shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> PrivateServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


__all__ = ["PrivateServer", "PrivateServerError", "free_port"]
