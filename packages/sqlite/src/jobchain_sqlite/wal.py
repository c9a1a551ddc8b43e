"""Switching a connection's database to WAL, tried again while another process switches it.

``PRAGMA journal_mode = WAL`` on a database still in rollback mode needs its exclusive lock.
When two connections both hold the shared lock and want that one (several workers or
migrations starting together on a new file), SQLite refuses one of them with "database is
locked" at once, without waiting in its busy handler, to avoid a deadlock. The refused one
tries again (the other's switch finishes in milliseconds, and then the pragma only reads the
mode), for up to the adapter's ``busy_timeout`` like any other lock wait.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable

WAL = "PRAGMA journal_mode = WAL"
_FIRST_PAUSE = 0.005
_LONGEST_PAUSE = 0.1


def _locked(error: sqlite3.OperationalError) -> bool:
    return "database is locked" in str(error)


def enable_wal_sync(switch: Callable[[], object], timeout: float) -> None:
    """Run ``switch`` (the pragma) until it is not refused as locked, for up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    pause = _FIRST_PAUSE
    while True:
        try:
            switch()
            return
        except sqlite3.OperationalError as error:
            if not _locked(error) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, _LONGEST_PAUSE)


async def enable_wal(switch: Callable[[], Awaitable[object]], busy_timeout: float) -> None:
    """:func:`enable_wal_sync` for an aiosqlite connection's pragma."""
    deadline = time.monotonic() + busy_timeout
    pause = _FIRST_PAUSE
    while True:
        try:
            await switch()
            return
        except sqlite3.OperationalError as error:
            if not _locked(error) or time.monotonic() >= deadline:
                raise
        await asyncio.sleep(pause)
        pause = min(pause * 2, _LONGEST_PAUSE)


__all__ = ["WAL", "enable_wal", "enable_wal_sync"]
