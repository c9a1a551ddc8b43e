"""Revoked dashboard sessions of PostgresStateTx (``contracts.sessions``, the ``RevokesSessions``
capability): ``session_revocation`` holds each revoked id's SHA-256 and its expiry.

``sessions_revoke`` is one statement (``sql/sessions_revoke.sql``: a CTE deletes the expired
revocations beside the upsert); ``session_revoked`` one primary-key probe. In the adapter's
``autocommit()`` each is a single round trip.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jobchain.contracts.sessions import SessionRevoked, SessionsRevoke, session_key
from jobchain_postgres._results import check_now
from jobchain_postgres.queries import Queries
from jobchain_postgres.rows import Row, Shape

__all__ = ["SessionsMixin"]


class SessionsMixin:
    """Revoke and look up sessions; the transaction class supplies ``_q`` and ``_rows``."""

    _q: Queries

    async def _rows(
        self, query: bytes, params: Mapping[str, Any], *, write: bool, ids: Sequence[str] = ()
    ) -> tuple[Shape, list[Row]]:
        raise NotImplementedError  # pragma: no cover - provided by PostgresStateTx

    async def sessions_revoke(self, params: SessionsRevoke) -> None:
        """Revoke a session until its expiry and delete the expired revocations (one statement)."""
        query_params = {
            "session_key": session_key(params.session_id),
            "expires_at": params.expires_at,
            "now": check_now(params.now),
        }
        await self._rows(self._q.sessions_revoke, query_params, write=True)

    async def session_revoked(self, params: SessionRevoked) -> bool:
        """Whether the session is revoked at ``params.now`` (one probe)."""
        query_params = {"session_key": session_key(params.session_id), "now": check_now(params.now)}
        _shape, rows = await self._rows(self._q.session_revoked, query_params, write=False)
        return bool(rows and rows[0][0])
