"""The one background thread (with one event loop) where a SyncClient's notify adapter lives.

Notify adapters are async (Redis, NATS, LISTEN/NOTIFY): their connections and listener tasks
belong to one event loop. A :class:`~jobchain.sync.SyncClient` with notify configured starts
this thread at connect and stops it at close; it never starts a loop per call. The caller's
thread hands it coroutines (the buffered side effects of a committed transaction, a
subscription) and waits for them, bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

logger = logging.getLogger("jobchain.sync")

FLUSH_TIMEOUT = 10.0
"""Seconds the caller's thread waits for the notify thread to send, subscribe or close."""

STOP_TIMEOUT = 10.0
"""Seconds :meth:`NotifyLoop.stop` waits for the thread to finish."""


class NotifyLoop:
    """A daemon thread running one event loop until :meth:`stop`."""

    def __init__(self, name: str = "jobchain-sync-notify") -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        # A daemon thread: a SyncClient the app forgot to close never blocks interpreter exit.
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._ready.set)
        try:
            self._loop.run_forever()
        finally:
            pending = [t for t in asyncio.all_tasks(self._loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self._loop.is_closed()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule ``coroutine`` on the loop; the caller may wait on the returned future."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float) -> T:
        """Run ``coroutine`` on the loop and wait for its result (TimeoutError after ``timeout`` s)."""
        future = self.submit(coroutine)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def call_soon(self, callback: Callable[[], object]) -> None:
        """Run a plain callback on the loop's thread."""
        self._loop.call_soon_threadsafe(callback)

    def stop(self) -> None:
        """Stop the loop (cancelling what still runs on it) and join the thread (bounded)."""
        if self._thread is threading.current_thread():
            raise RuntimeError("NotifyLoop.stop() called from its own thread")
        if not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed in between
                self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(STOP_TIMEOUT)
        if self._thread.is_alive():
            logger.warning("the jobchain.sync notify thread did not stop within %g s", STOP_TIMEOUT)


__all__ = ["FLUSH_TIMEOUT", "NotifyLoop"]
