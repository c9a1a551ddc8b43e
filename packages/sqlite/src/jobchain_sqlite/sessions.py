"""Revoked dashboard sessions on SQLite (``contracts.sessions``, the ``RevokesSessions``
capability): ``{prefix}session_revocation`` holds each revoked id's SHA-256 and its expiry.

``sessions_revoke`` runs two statements in the caller's write transaction (SQLite has no DML
inside a CTE): the DELETE of expired revocations, then the upsert. Both run in-process on the
local file: no network round trip. ``session_revoked`` is one primary-key read.
"""

from __future__ import annotations

from jobchain.contracts.sessions import SessionRevoked, SessionsRevoke, session_key
from jobchain.entities import utcnow
from jobchain_sqlite.context import TxContext
from jobchain_sqlite.rows import fmt_time


async def sessions_revoke(ctx: TxContext, params: SessionsRevoke) -> None:
    """Delete the expired revocations, then revoke the session until its expiry."""
    ctx.require_write("sessions_revoke")
    now = fmt_time(params.now or utcnow())
    await ctx.fetch(ctx.q.sessions_prune, {"now": now})
    await ctx.fetch(
        ctx.q.sessions_revoke,
        {
            "session_key": session_key(params.session_id),
            "expires_at": fmt_time(params.expires_at),
            "now": now,
        },
    )


async def session_revoked(ctx: TxContext, params: SessionRevoked) -> bool:
    """Whether the session is revoked at ``params.now``."""
    now = fmt_time(params.now or utcnow())
    rows = await ctx.fetch(ctx.q.session_revoked, {"session_key": session_key(params.session_id), "now": now})
    return bool(rows)


__all__ = ["session_revoked", "sessions_revoke"]
