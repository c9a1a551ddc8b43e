"""Tell when a caller's SQLAlchemy transaction commits, for backends that join it.

Shared by every SQL backend: a joined SQLAlchemy ``AsyncSession`` or ``AsyncConnection``
reports its commit and rollback through SQLAlchemy events, so the client can send the
transaction's notifications right after the caller's commit instead of asking the caller
to call ``tx.flush()``. SQLAlchemy is imported only when such an object is passed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("jobchain.integrations.sqlalchemy")


def is_sqlalchemy_object(obj: object) -> bool:
    """True for objects defined by SQLAlchemy (checked without importing it)."""
    return type(obj).__module__.startswith("sqlalchemy.")


def observe_sqlalchemy_commit(
    connection: object,
    on_commit: Callable[[], Awaitable[None]],
    on_rollback: Callable[[], None],
    tasks: set[asyncio.Task[None]],
) -> bool:
    """Run ``on_commit`` after ``connection``'s transaction commits (``on_rollback`` if it rolls back).

    ``connection`` may be an SQLAlchemy ``AsyncSession`` or ``AsyncConnection``; anything else
    returns False (the caller then flushes after committing). ``tasks`` keeps the flush tasks
    referenced until they finish (the adapter awaits them on close).
    """
    if not is_sqlalchemy_object(connection):
        return False
    from sqlalchemy import event
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    target: Any
    if isinstance(connection, AsyncSession):
        target, commit_event, rollback_event = connection.sync_session, "after_commit", "after_rollback"
    elif isinstance(connection, AsyncConnection):
        target, commit_event, rollback_event = connection.sync_connection, "commit", "rollback"
    else:
        return False
    loop = asyncio.get_running_loop()

    def committed(*_: object) -> None:
        event.remove(target, rollback_event, rolled_back)
        task = loop.create_task(_flush(on_commit))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def rolled_back(*_: object) -> None:
        event.remove(target, commit_event, committed)
        on_rollback()

    event.listen(target, commit_event, committed, once=True)
    event.listen(target, rollback_event, rolled_back, once=True)
    return True


async def _flush(on_commit: Callable[[], Awaitable[None]]) -> None:
    try:
        await on_commit()
    except Exception:  # side effects are hints; the caller's commit already happened
        log.warning("sending notifications after the caller's commit failed", exc_info=True)
