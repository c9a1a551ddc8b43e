"""The synchronous SQLite adapter through the whole state conformance suite, driven.

Every coroutine of the adapter is run by ``jobchain.sync.drive`` (so one that suspended would
raise SyncWiringError), and each transaction lives on a thread of its own for its whole life,
as a request thread of a sync app holds it: the suite's concurrency cases (a second
transaction waiting for the first, rollbacks beside commits) then run across real threads
sharing one adapter.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from jobchain.sync.drive import drive
from jobchain_conformance import StateAdapterSuite
from jobchain_sqlite.sync import SyncSqliteStateAdapter

T = TypeVar("T")


class _Thread:
    """One thread that runs everything of one transaction (its savepoints included)."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sync-tx")
        self._stopped = False

    async def run(self, call: Callable[[], T]) -> T:
        if self._stopped:  # the transaction ended: a call only raises (it touches no connection)
            return call()
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def stop(self) -> None:
        self._stopped = True
        self._pool.shutdown(wait=False)


class _DrivenTransaction:
    """An async context manager over a driven one, entered and exited on ``thread``."""

    def __init__(self, cm: AbstractAsyncContextManager[Any], thread: _Thread | None) -> None:
        self._cm = cm
        self._own = thread is None
        self._thread = thread or _Thread()

    async def __aenter__(self) -> _DrivenTx:
        try:
            tx = await self._thread.run(lambda: drive(self._cm.__aenter__()))
        except BaseException:
            if self._own:
                self._thread.stop()
            raise
        return _DrivenTx(tx, self._thread)

    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self._thread.run(lambda: drive(self._cm.__aexit__(*exc)))
        finally:
            if self._own:
                self._thread.stop()


class _DrivenTx:
    def __init__(self, tx: Any, thread: _Thread) -> None:
        self._tx = tx
        self._thread = thread

    def savepoint(self) -> _DrivenTransaction:
        return _DrivenTransaction(self._tx.savepoint(), self._thread)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._tx, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await self._thread.run(lambda: drive(attr(*args, **kwargs)))

        return call


class _DrivenAdapter:
    """The adapter as the suite sees it: each transaction on its own thread, all driven."""

    def __init__(self, adapter: SyncSqliteStateAdapter) -> None:
        self._adapter = adapter

    def transaction(self, **kwargs: Any) -> _DrivenTransaction:
        return _DrivenTransaction(self._adapter.transaction(**kwargs), None)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._adapter, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(lambda: drive(attr(*args, **kwargs)))

        return call


class TestDrivenSyncSqliteState(StateAdapterSuite):
    @pytest.fixture
    async def state_adapter(self, tmp_path: Path) -> AsyncIterator[Any]:
        adapter = SyncSqliteStateAdapter(str(tmp_path / "conformance.db"))
        drive(adapter.migrate())
        yield _DrivenAdapter(adapter)
        drive(adapter.close())
