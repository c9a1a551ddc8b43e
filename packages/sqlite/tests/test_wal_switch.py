"""Switching a new database to WAL while other processes do the same.

SQLite answers ``PRAGMA journal_mode = WAL`` with "database is locked" at once, without its
busy handler, when two connections both hold a shared lock and want the exclusive one: the
one refused must try again, or several workers (or migrations) starting together on a new file
fail. Seen in a full run, as ``test_concurrent_migrations_from_several_processes_apply_once``.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from jobchain_sqlite.wal import WAL, enable_wal, enable_wal_sync

ROUNDS = 12
PROCESSES = 6


def _switch(
    path: str, barrier: multiprocessing.synchronize.Barrier, results: multiprocessing.Queue[str]
) -> None:
    barrier.wait()
    try:
        conn = sqlite3.connect(path, timeout=30, isolation_level=None)
        enable_wal_sync(lambda: conn.execute(WAL).fetchall(), 30)
        results.put(conn.execute("PRAGMA journal_mode").fetchall()[0][0])
        conn.close()
    except Exception as error:  # reported to the parent, which asserts on it
        results.put(repr(error))


@pytest.mark.timeout(300)
def test_processes_switching_a_new_database_to_wal_together_all_succeed(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")  # the target lives in this test module
    outcomes: list[str] = []
    for round_ in range(ROUNDS):
        path = str(tmp_path / f"new-{round_}.sqlite")
        barrier = context.Barrier(PROCESSES)
        results: multiprocessing.Queue[str] = context.Queue()
        processes = [context.Process(target=_switch, args=(path, barrier, results)) for _ in range(PROCESSES)]
        for process in processes:
            process.start()
        outcomes += [results.get(timeout=120) for _ in processes]
        for process in processes:
            process.join(timeout=60)
    assert [o for o in outcomes if o != "wal"] == []


def test_a_locked_switch_is_tried_again_until_it_succeeds() -> None:
    calls: list[int] = []

    def switch() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise sqlite3.OperationalError("database is locked")

    enable_wal_sync(switch, 30)
    assert len(calls) == 3


def test_other_errors_and_a_lock_past_the_timeout_are_raised() -> None:
    def broken() -> None:
        raise sqlite3.OperationalError("disk I/O error")

    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        enable_wal_sync(broken, 30)

    def locked() -> None:
        raise sqlite3.OperationalError("database is locked")

    with pytest.raises(sqlite3.OperationalError, match="locked"):
        enable_wal_sync(locked, 0)


async def test_the_async_switch_is_tried_again_too() -> None:
    calls: list[int] = []

    async def switch() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise sqlite3.OperationalError("database is locked")

    await enable_wal(switch, 30)
    assert len(calls) == 3
