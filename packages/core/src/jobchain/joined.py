"""Joined transactions whose wake-ups wait for ``await tx.flush()``: never silently lost.

When a caller joins their own psycopg or aiosqlite connection, jobchain cannot see the
commit, so the buffered wake-ups wait for ``await tx.flush()``. Forgetting it used to cost a
full poll interval, silently. :class:`JoinedFlushes` (one per client) watches those
transactions instead:

- it reads the driver's own "in a transaction" flag (psycopg ``info.transaction_status``,
  aiosqlite/sqlite3 ``in_transaction``; no I/O) until the caller's transaction has ended;
- after a grace period (``GRACE`` seconds) still unflushed, it decides by a *witness*: a
  chain the transaction started. Found through jobchain's own connection, the transaction
  committed: the wake-ups are sent late. Not found, it rolled back: they are dropped, with
  no warning. Without a witness (only triggers, deletes or completions) jobchain cannot
  tell commit from rollback and sends nothing;
- the first unflushed transaction of a client logs one WARNING naming ``await tx.flush()``;
  later ones log at DEBUG. ``Client.close()`` settles what is still pending the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from jobchain.contracts.state import ChainGet, StateAdapter
from jobchain.transactions import Transaction, TransactionHooks

logger = logging.getLogger("jobchain.transactions")

GRACE: float = 1.0
"""Seconds the caller has, once their transaction has ended, to call ``await tx.flush()``."""

DOCS: Final = "docs/reference/client.md, 'Joining your own transaction'"
_POLL_FIRST: Final = 0.01
_POLL_MAX: Final = 0.25


def transaction_open(connection: object) -> bool | None:
    """Whether the driver ``connection`` is inside a transaction; None if it does not say.

    psycopg: ``info.transaction_status`` (ACTIVE, INTRANS, INERROR are open); aiosqlite and
    sqlite3: ``in_transaction``. A closed connection counts as ended.
    """
    try:
        info = getattr(connection, "info", None)
        status = getattr(info, "transaction_status", None)
        if status is not None:
            return getattr(status, "name", str(status)) in ("ACTIVE", "INTRANS", "INERROR")
        flag = getattr(connection, "in_transaction", None)
    except Exception:  # a closed connection may refuse to answer: its transaction is over
        return False
    return flag if isinstance(flag, bool) else None


@dataclass(eq=False, slots=True)
class _Pending:
    connection: object
    hooks: TransactionHooks
    flush: Callable[[], Awaitable[None]]
    witness: str | None
    ended_at: float | None = None
    flushed: bool = False


class JoinedFlushes:
    """The joined transactions of one client whose wake-ups still wait for ``tx.flush()``."""

    def __init__(self, state: StateAdapter) -> None:
        self._state = state
        self._pending: list[_Pending] = []
        self._task: asyncio.Task[None] | None = None
        self._warned = False

    def track(self, tx: Transaction, connection: object, flush: Callable[[], Awaitable[None]]) -> None:
        """Hand ``flush`` to ``tx.flush()`` and watch ``connection`` in case it is never called."""
        entry = _Pending(connection, tx.hooks, flush, tx.hooks.witness_id)

        async def deferred() -> None:
            entry.flushed = True
            await flush()

        tx.defer_flush(deferred)
        self._pending.append(entry)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._watch(), name="jobchain-joined-flush")

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        delay = _POLL_FIRST
        while self._pending:
            await asyncio.sleep(delay)
            delay = min(delay * 2, _POLL_MAX)
            now = loop.time()
            for entry in list(self._pending):
                if entry.flushed or entry.hooks.closed:
                    self._pending.remove(entry)
                elif entry.ended_at is None:
                    if transaction_open(entry.connection) is False:
                        entry.ended_at = now
                elif now - entry.ended_at >= GRACE:
                    self._pending.remove(entry)
                    await self._settle(entry, now - entry.ended_at)

    async def _settle(self, entry: _Pending, late: float | None) -> None:
        if entry.flushed or entry.hooks.closed:
            return
        committed = await self._committed(entry.witness) if entry.witness is not None else None
        if committed is False:
            entry.hooks.discard()  # rolled back: nothing to send, nothing to warn about
            return
        if committed:
            entry.flushed = True
            when = f" about {late:.1f} s late" if late is not None else " late"
            self._warn(f"jobchain noticed the commit and sent them{when}")
            await entry.flush()
        else:
            self._warn(
                "jobchain cannot tell whether it committed, so they were not sent "
                "(workers find its jobs at their next poll)"
            )

    async def _committed(self, chain_id: str) -> bool | None:
        try:
            async with self._state.transaction(read_only=True) as tx:
                return await tx.chain_get(ChainGet(chain_id=chain_id)) is not None
        except Exception:
            logger.debug("could not check whether a joined transaction committed", exc_info=True)
            return None

    def _warn(self, outcome: str) -> None:
        level = logging.DEBUG if self._warned else logging.WARNING
        self._warned = True
        logger.log(
            level,
            "a joined transaction's wake-ups were never flushed: %s. After committing your own "
            "connection, call `await tx.flush()` (see %s). Logged once per client.",
            outcome,
            DOCS,
        )

    async def close(self) -> None:
        """Settle what is still pending (the client is closing): send, drop or warn."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        pending, self._pending = self._pending, []
        for entry in pending:
            if entry.flushed or entry.hooks.closed:
                continue
            if entry.ended_at is not None or transaction_open(entry.connection) is False:
                await self._settle(entry, None)
            else:
                self._warn("the client closed while that transaction was still open")


__all__ = ["GRACE", "JoinedFlushes", "transaction_open"]
