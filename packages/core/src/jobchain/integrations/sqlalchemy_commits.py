"""Tell when a caller's SQLAlchemy transaction commits, for backends that join it.

Shared by every SQL backend: a joined SQLAlchemy ``AsyncSession`` or ``AsyncConnection``
(async client) or ``Session`` or ``Connection`` (:mod:`jobchain.sync`) reports its commit and
rollback through SQLAlchemy events, so the client can send the transaction's notifications
right after the caller's commit instead of asking the caller to call ``tx.flush()``.
SQLAlchemy is imported only when such an object is passed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

CommitFinished = Callable[[], bool]
"""Asked after a commit event: True once the caller's commit has really finished."""

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


def _always() -> bool:
    return True


def observe_sqlalchemy_sync_commit(
    connection: object,
    on_commit: Callable[[CommitFinished], None],
    on_rollback: Callable[[], None],
) -> bool:
    """Call ``on_commit(finished)`` when a sync ``Session``'s or ``Connection``'s transaction commits.

    ``on_rollback`` runs instead if it rolls back. Anything else returns False (the caller then
    flushes after committing). A ``Session`` reports ``after_commit``, after its database commit:
    ``finished()`` is always True there. A ``Connection`` has only its ``commit`` event, which
    SQLAlchemy fires *before* the DBAPI commit (leaky: no event follows it), so ``on_commit`` must
    not publish until ``finished()`` turns True: the connection then no longer holds the
    transaction that committed (read without locks; a commit that failed and was rolled back
    and followed by a new transaction also reads True, which costs one spurious wake-up).
    """
    if not is_sqlalchemy_object(connection):
        return False
    from sqlalchemy import event
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session

    target: Any
    if isinstance(connection, Session):
        target, commit_event, rollback_event = connection, "after_commit", "after_rollback"
    elif isinstance(connection, Connection):
        target, commit_event, rollback_event = connection, "commit", "rollback"
    else:
        return False

    def committed(*_: object) -> None:
        event.remove(target, rollback_event, rolled_back)
        if isinstance(connection, Session):
            on_commit(_always)
            return
        committing = connection.get_transaction()
        on_commit(lambda: connection.get_transaction() is not committing)

    def rolled_back(*_: object) -> None:
        event.remove(target, commit_event, committed)
        on_rollback()

    event.listen(target, commit_event, committed, once=True)
    event.listen(target, rollback_event, rolled_back, once=True)
    return True
