"""Counting connections: psycopg's ``connect`` holds a slot for each connection to the shared
server until the connection is closed or collected, and which connections go there."""

from __future__ import annotations

import os
import re
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from .slots import DEFAULT_SIZE, DEFAULT_WAIT, DIR_ENV, SIZE_ENV, WAIT_ENV, Budget, Slots

DEFAULT_URL: Final = "postgresql://postgres@127.0.0.1:5432/test"
_LOCAL: Final = frozenset({"127.0.0.1", "localhost", "::1", ""})


def shared_server(url: str | None = None) -> tuple[str, str]:
    """``(host, port)`` of the shared test server (``JOBCHAIN_TEST_POSTGRES_URL`` by default)."""
    parts = urlsplit(url or os.environ.get("JOBCHAIN_TEST_POSTGRES_URL", "").strip() or DEFAULT_URL)
    return parts.hostname or "", str(parts.port or 5432)


def default_directory(server: tuple[str, str]) -> Path:
    host = re.sub(r"[^A-Za-z0-9.]+", "_", server[0]) or "local"
    return Path(tempfile.gettempdir()) / f"jobchain-pg-budget-{os.getuid()}-{host}-{server[1]}"


def from_environment() -> Budget | None:
    """The budget the environment asks for (``JOBCHAIN_TEST_PG_CONNECTIONS=0``: none)."""
    size = int(os.environ.get(SIZE_ENV, "").strip() or DEFAULT_SIZE)
    if size <= 0:
        return None
    directory = os.environ.get(DIR_ENV, "").strip()
    slots = Slots(Path(directory) if directory else default_directory(shared_server()), size)
    return Budget(slots, wait=float(os.environ.get(WAIT_ENV, "").strip() or DEFAULT_WAIT))


def targets_server(server: tuple[str, str], conninfo: str, kwargs: dict[str, Any]) -> bool:
    """True if a connection with these arguments goes to ``server`` (TCP or its Unix socket)."""
    from psycopg.conninfo import conninfo_to_dict

    keys = ("host", "hostaddr", "port", "service")
    params = conninfo_to_dict(conninfo, **{k: v for k, v in kwargs.items() if k in keys and v is not None})
    hosts = str(params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST", "")).split(",")
    ports = str(params.get("port") or os.environ.get("PGPORT", "") or "5432").split(",")
    shared_host, shared_port = server
    local = shared_host in _LOCAL
    for index, host in enumerate(hosts):
        port = ports[index] if index < len(ports) else ports[-1]
        same_host = host == shared_host or (local and (host in _LOCAL or host.startswith("/")))
        if same_host and (port or "5432") == shared_port:
            return True
    return False


_installed: Budget | None = None


def install(budget: Budget, server: tuple[str, str] | None = None) -> Budget:
    """Make psycopg's ``connect`` (sync and async, ``psycopg.connect`` too) hold a slot of
    ``budget`` for every connection to ``server`` until it is closed; returns the budget in
    force (once per process: a later call returns the first one)."""
    import psycopg

    global _installed
    if _installed is not None:
        return _installed  # a second pytest session in this process (pytester) keeps the first
    _installed = budget
    where = server or shared_server()
    sync_connect = psycopg.Connection.connect.__func__  # type: ignore[attr-defined]  # the classmethod's function
    async_connect = psycopg.AsyncConnection.connect.__func__  # type: ignore[attr-defined]  # as above
    sync_close, async_close = psycopg.Connection.close, psycopg.AsyncConnection.close
    finalizers: weakref.WeakKeyDictionary[Any, Callable[[], Any]] = weakref.WeakKeyDictionary()

    def counted(conninfo: str, kwargs: dict[str, Any]) -> bool:
        return not budget.forked and targets_server(where, conninfo, kwargs)

    def attach(connection: Any, slot: int) -> None:
        finalizers[connection] = weakref.finalize(connection, budget.give_back, slot)

    def connect(cls: Any, /, conninfo: str = "", **kwargs: Any) -> Any:
        if not counted(conninfo, kwargs):
            return sync_connect(cls, conninfo, **kwargs)
        slot = budget.take()
        try:
            connection = sync_connect(cls, conninfo, **kwargs)
        except BaseException:
            budget.give_back(slot)
            raise
        attach(connection, slot)
        return connection

    async def connect_async(cls: Any, /, conninfo: str = "", **kwargs: Any) -> Any:
        if not counted(conninfo, kwargs):
            return await async_connect(cls, conninfo, **kwargs)
        slot = await budget.take_async()
        try:
            connection = await async_connect(cls, conninfo, **kwargs)
        except BaseException:
            budget.give_back(slot)
            raise
        attach(connection, slot)
        return connection

    def released(connection: Any) -> None:
        finalizer = finalizers.get(connection)
        if finalizer is not None and connection.closed:
            finalizer()  # runs give_back once; the later collection does nothing

    def close(self: Any) -> None:
        sync_close(self)
        released(self)

    async def close_async(self: Any) -> None:
        await async_close(self)
        released(self)

    psycopg.Connection.connect = classmethod(connect)  # type: ignore[method-assign,assignment]  # counting wrapper
    psycopg.AsyncConnection.connect = classmethod(connect_async)  # type: ignore[method-assign,assignment]  # as above
    psycopg.Connection.close = close  # type: ignore[method-assign]  # gives the slot back
    psycopg.AsyncConnection.close = close_async  # type: ignore[method-assign]  # as above
    psycopg.connect = psycopg.Connection.connect  # the module's alias was bound at import
    return budget


def installed() -> Budget | None:
    """The budget this process's psycopg counts against, if any."""
    return _installed
