"""Revoked dashboard sessions: the optional :class:`RevokesSessions` state capability.

A dashboard session is a signed cookie with no server-side row, so logging out cannot delete
it; instead logout records the session id as revoked until the cookie would expire anyway,
in the state backend that every dashboard process shares. A backend stores only
:func:`session_key` of an id (its SHA-256, hex), never the id: whoever reads the table cannot
rebuild a cookie from it (it also lacks the signing key).

Optional: a state transaction without these methods makes the dashboard keep revocations in
its own process only.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from jobchain.errors import InvalidArgumentError

MAX_SESSION_ID = 255
"""The longest session id accepted (the dashboard's are 24 characters)."""


def _check_session_id(value: object) -> None:
    if not isinstance(value, str) or not value or len(value) > MAX_SESSION_ID:
        raise InvalidArgumentError(
            f"session_id must be a non-empty string of at most {MAX_SESSION_ID} characters"
        )
    if not value.isascii() or not value.isprintable():
        raise InvalidArgumentError("session_id must be printable ASCII")


def _check_aware(name: str, value: object, *, optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidArgumentError(f"{name} must be a timezone-aware datetime")


def session_key(session_id: str) -> str:
    """What a backend stores for ``session_id``: its SHA-256 as 64 lowercase hex digits."""
    return hashlib.sha256(session_id.encode("ascii")).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionsRevoke:
    """Record ``session_id`` as revoked until ``expires_at``, in one round trip.

    Stores ``session_key(session_id)`` with ``expires_at``; revoking an id already revoked
    keeps the later of the two expiries. The same statement (or round trip) deletes every
    revocation whose ``expires_at`` is at or before ``now``, so the table holds only sessions
    that could still be presented.
    """

    session_id: str
    expires_at: datetime
    now: datetime | None = None

    def __post_init__(self) -> None:
        _check_session_id(self.session_id)
        _check_aware("expires_at", self.expires_at, optional=False)
        _check_aware("now", self.now, optional=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRevoked:
    """Ask whether ``session_id`` is revoked at ``now`` (one round trip, reads only).

    True while a revocation of it has ``expires_at`` after ``now``; False for an id never
    revoked and for one whose revocation expired (pruned or not).
    """

    session_id: str
    now: datetime | None = None

    def __post_init__(self) -> None:
        _check_session_id(self.session_id)
        _check_aware("now", self.now, optional=True)


@runtime_checkable
class RevokesSessions(Protocol):
    """Optional: a state transaction that stores revoked dashboard sessions.

    Guarantees (suite: SessionRevocationTests): a revoked id reads as revoked until its
    expiry and not after; another id does not; a revocation rolled back never happened; an
    expired revocation is deleted by the next ``sessions_revoke``; only the id's hash is
    stored.
    """

    async def sessions_revoke(self, params: SessionsRevoke) -> None:
        """Revoke a session until its expiry; delete expired revocations (one round trip)."""
        ...

    async def session_revoked(self, params: SessionRevoked) -> bool:
        """Whether the session is revoked at ``params.now`` (one round trip)."""
        ...


__all__ = ["MAX_SESSION_ID", "RevokesSessions", "SessionRevoked", "SessionsRevoke", "session_key"]
