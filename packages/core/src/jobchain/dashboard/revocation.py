"""Logout revokes the session server-side (issue 34, finding 10).

A session is a signed cookie with no server-side row, so a copy of it would stay valid until it
expires (``session_max_age``, 12 hours by default). On logout the dashboard records the
session's id as revoked until that expiry, in the state backend (the ``RevokesSessions``
capability: memory://, SQLite and PostgreSQL have it), and every dashboard process sharing the
``secret_key`` and the state refuses the cookie from then on. Only the id's SHA-256 is stored.

A cookie-authenticated request costs one state round trip (a read); requests authenticated by
their ``Authorization`` header, unauthenticated sessions and static files cost none.

A state adapter without the capability keeps revocations in this process only (bounded by
:data:`MAX_LOCAL_REVOCATIONS`, pruned by expiry): another process behind the same load balancer
would still accept the cookie until it expires. Use a backend that has the capability when
several processes serve the dashboard.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from typing import Final, Protocol

from starlette.types import Receive, Scope, Send

from jobchain.client import Client
from jobchain.contracts import (
    RevokesSessions,
    RunsOperationsAlone,
    SessionRevoked,
    SessionsRevoke,
    StateTx,
    session_key,
)
from jobchain.dashboard.security import Session, route_path
from jobchain.entities import utcnow
from jobchain.errors import JobchainError

MAX_LOCAL_REVOCATIONS: Final = 10_000
"""Revocations one process keeps at most without the state capability (memory stays bounded);
when full, the one that expires first is dropped."""


class LocalRevocations:
    """Revoked session ids of this process only: ``session_key(id)`` → revoked until."""

    def __init__(self, limit: int = MAX_LOCAL_REVOCATIONS) -> None:
        self.limit = limit
        self._until: dict[str, datetime] = {}

    def __len__(self) -> int:
        return len(self._until)

    def revoke(self, session_id: str, expires_at: datetime, *, now: datetime) -> None:
        """Revoke until ``expires_at`` (the later expiry wins); expired ones are dropped first."""
        for key in [key for key, until in self._until.items() if until <= now]:
            del self._until[key]
        key = session_key(session_id)
        if expires_at <= now:
            return
        if key not in self._until and len(self._until) >= self.limit:
            del self._until[min(self._until, key=self._until.__getitem__)]
        self._until[key] = max(expires_at, self._until.get(key, expires_at))

    def revoked(self, session_id: str, *, now: datetime) -> bool:
        until = self._until.get(session_key(session_id))
        return until is not None and until > now


class _Source(Protocol):
    async def get(self) -> Client: ...


class Revocations:
    """The dashboard's revoked sessions: in the state backend when it can store them.

    Whether it can is learned from the first transaction (``isinstance(tx, RevokesSessions)``)
    and remembered; without the capability revocations go to a :class:`LocalRevocations`.
    """

    def __init__(
        self,
        source: _Source,
        *,
        clock: Callable[[], datetime] = utcnow,
        limit: int = MAX_LOCAL_REVOCATIONS,
    ) -> None:
        self._source = source
        self._clock = clock
        self.local = LocalRevocations(limit)
        self._stored: bool | None = None  # None: not known yet

    async def revoke(self, session: Session) -> None:
        """Revoke ``session`` until its cookie would expire."""
        expires_at, now = datetime.fromtimestamp(session.expires, UTC), self._clock()
        if self._stored is not False:
            async with await self._open(read_only=False) as tx:
                if isinstance(tx, RevokesSessions):
                    params = SessionsRevoke(session_id=session.sid, expires_at=expires_at, now=now)
                    await tx.sessions_revoke(params)
                    self._stored = True
                    return
            self._stored = False
        self.local.revoke(session.sid, expires_at, now=now)

    async def revoked(self, session: Session) -> bool:
        """Whether ``session`` was revoked (one state read while the backend stores them)."""
        now = self._clock()
        if self._stored is not False:
            async with await self._open(read_only=True) as tx:
                if isinstance(tx, RevokesSessions):
                    self._stored = True
                    return await tx.session_revoked(SessionRevoked(session_id=session.sid, now=now))
            self._stored = False
        return self.local.revoked(session.sid, now=now)

    async def refuses(self, session: Session, scope: Scope, *, by_header: bool) -> bool:
        """Whether the request's cookie session must count as none: it was revoked. Looked up
        only where the cookie is what authenticates (not for static files, unauthenticated
        sessions, or requests whose Authorization header holds)."""
        if not session.authenticated or by_header or route_path(scope).startswith("/static/"):
            return False
        return await self.revoked(session)

    async def _open(self, *, read_only: bool) -> AbstractAsyncContextManager[StateTx]:
        # One operation: without BEGIN/COMMIT where the backend can (one round trip).
        state = (await self._source.get()).state
        if isinstance(state, RunsOperationsAlone):
            return state.autocommit(read_only=read_only)
        return state.transaction(read_only=read_only)


async def backend_failed(scope: Scope, receive: Receive, send: Send, error: JobchainError) -> None:
    """The error page of a request whose revocation look-up failed: nothing else is served
    until the state answers (the cookie is kept, so the session resumes once it does)."""
    from starlette.requests import Request

    from jobchain.dashboard import pages

    response = await pages.server_error(Request(scope, receive), error)
    await response(scope, receive, send)


__all__ = ["MAX_LOCAL_REVOCATIONS", "LocalRevocations", "Revocations", "backend_failed"]
