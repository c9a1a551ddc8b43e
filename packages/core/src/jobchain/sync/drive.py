"""Run jobchain's async code to completion on a synchronous driver, without an event loop.

The state adapters are written once, as coroutines over a small driver surface. Given a
synchronous driver (a psycopg ``Connection``, a ``sqlite3.Connection``) behind that surface,
their coroutines never suspend: every ``await`` finishes at once. :func:`drive` runs such a
coroutine by sending it one ``None`` and reading its result from ``StopIteration``: the same
validation, SQL and result mapping as the async client, with no loop in the caller and none
started per call.

A coroutine that does suspend (it awaited a real future: an async driver, ``asyncio.sleep``, a
contended ``asyncio.Lock``) is a bug in the synchronous wiring, never the caller's fault:
:class:`SyncWiringError` says which awaitable it was.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from jobchain.errors import SyncInEventLoopError

T = TypeVar("T")


class SyncWiringError(RuntimeError):
    """A coroutine driven synchronously tried to suspend (jobchain bug: it awaited real I/O)."""


def drive(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion in this thread; it must never suspend."""
    try:
        yielded = coroutine.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    except RuntimeError as error:
        if "no running event loop" not in str(error):
            raise
        # asyncio.sleep, create_task and friends look for the loop before they suspend.
        raise SyncWiringError(f"{error} while driven synchronously (jobchain bug)") from error
    except AttributeError as error:
        if "create_future" not in str(error):
            raise
        # A contended asyncio.Lock/Event/Condition asks its (absent) loop for a future to wait on.
        raise SyncWiringError(
            "an asyncio primitive had to wait while driven synchronously (jobchain bug, or memory:// "
            "used by two open transactions of one thread)"
        ) from error
    coroutine.close()
    name = getattr(coroutine, "__qualname__", repr(coroutine))
    raise SyncWiringError(
        f"{name} suspended on {yielded!r} while driven synchronously; "
        "a synchronous path must only await synchronous driver calls"
    )


def refuse_in_event_loop(what: str) -> None:
    """Raise SyncInEventLoopError if this thread runs an event loop (the call would block it)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise SyncInEventLoopError(what)


__all__ = ["SyncWiringError", "drive", "refuse_in_event_loop"]
